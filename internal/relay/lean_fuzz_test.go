package relay

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/internal/httppath"
)

// FuzzLeanHead holds the head the lean path writes for a request to the
// request the relay builds for it (outbound), which internal/upstream
// then writes: the same request line, and the same fields, but for the
// framing ones upstream leaves out. The request is made of fuzzed fields,
// a fuzzed query, and a peer that is or is not a trusted proxy.
// ci:fuzztime 20000x
func FuzzLeanHead(f *testing.F) {
	f.Add("User-Agent", "t/1", "X-Forwarded-For", "6.6.6.6", "a=1;b=2", false)
	f.Add("X_Forwarded_For", "1.2.3.4", "X-Forwarded-Proto", "https", "", true)
	f.Add("X-Real-Ip", "9.9.9.9", "Forwarded", "for=1.2.3.4", "q=%zz", true)
	f.Add("Keep-Alive", "1", "Cookie", "a=b", "x", false)
	f.Add("Connection", "keep-alive, X-Hop", "X-Hop", "1", "", false)
	f.Add("Connection", "x-forwarded-for, cookie", "Cookie", "a", "", true)
	f.Add("Connection", "a,b,c,d,e", "E", "5", "", false)
	transport := NewTransport()
	f.Fuzz(func(t *testing.T, name1, value1, name2, value2, query string, trusted bool) {
		r := &http.Request{Method: http.MethodGet, Host: "app.test", Header: http.Header{}, RemoteAddr: "10.0.0.7:5000",
			URL: &url.URL{Path: "/p", RawQuery: query}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
		for _, f := range [][2]string{{name1, value1}, {name2, value2}} {
			name, value := textproto.CanonicalMIMEHeaderKey(f[0]), textproto.TrimString(f[1])
			// What the server's parser would accept, as it would store it.
			if !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(value) || name == "Host" {
				return
			}
			r.Header[name] = append(r.Header[name], value)
		}
		if strings.ContainsAny(query, " #\x00\r\n\t") || !IsLeanRequest(withURI(r), httppath.RejectSlashes) {
			return // the server refuses such a target, or the lean path does not take it
		}
		for _, header := range []clientkey.Header{clientkey.HeaderXForwardedFor, clientkey.HeaderForwarded} {
			res := &clientkey.Resolver{Header: header}
			if trusted {
				set, _ := clientkey.ParseProxySet([]string{"10.0.0.0/8"})
				res.Trusted = set
			}
			rl := &Relay{fw: Forwarding{res: res}, t: transport, pool: &Pool{ups: []*Upstream{{scheme: "http", host: "up:80"}}}}
			var fwd [5]string
			head, ok := rl.AppendHead(nil, r, netip.Addr{}, fwd[:])
			if !ok {
				if _, fits := connectionNamed(r.Header["Connection"], make([]string, 0, maxNamedHops)); !fits {
					return // handed to the relay's own code
				}
				t.Fatal("no head for a request from a TCP peer")
			}
			want := relayHead(r, rl)
			if got := sortedHead(string(head)); got != want {
				t.Fatalf("header %v, query %q, trusted %v, %v:\nlean path:\n%s\nrelay:\n%s", r.Header, query, trusted, header, got, want)
			}
		}
	})
}

// withURI sets r.RequestURI as the server would have read it.
func withURI(r *http.Request) *http.Request {
	r.RequestURI = r.URL.RequestURI()
	return r
}

// relayHead is the head internal/upstream writes (writeRequest) for the
// request the relay builds for r (outbound), in sortedHead's form.
func relayHead(r *http.Request, rl *Relay) string {
	o := rl.outbound(httptest.NewRecorder(), r, rl.pool.ups[0], "")
	defer o.release()
	var b strings.Builder
	b.WriteString("GET " + o.req.URL.RequestURI() + " HTTP/1.1\r\nHost: " + o.req.Host + "\r\n")
	for name, values := range o.req.Header {
		switch name {
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer": // writeRequest leaves these out
			continue
		}
		for _, v := range values {
			b.WriteString(name + ": " + v + "\r\n")
		}
	}
	b.WriteString("\r\n")
	return sortedHead(b.String())
}

// sortedHead is a head with its field lines sorted: both write fields in
// a map's order.
func sortedHead(head string) string {
	lines := strings.Split(strings.TrimSuffix(head, "\r\n\r\n"), "\r\n")
	slices.Sort(lines[1:])
	return strings.Join(lines, "\n")
}
