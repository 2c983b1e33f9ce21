package exchange

import (
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/internal/accesslog"
	"github.com/seed-a07d1050/portcullis/internal/config"
)

// TestAccessLineClientOfEachPeer writes the lines of three times as many
// RemoteAddrs as accessClients keeps, in rounds (so that some are found in
// the table and some were replaced), interleaved with lines from trusted
// proxies whose RemoteAddr never changes but whose X-Forwarded-For names a
// new client each time, and checks the client field of every line.
func TestAccessLineClientOfEachPeer(t *testing.T) {
	trusted := clientkey.MustParseProxySet("10.0.0.0/8", "fd00::/8")
	for _, tc := range []struct {
		name   string
		header clientkey.Header
	}{
		{"x-forwarded-for", clientkey.HeaderXForwardedFor},
		{"no header read", clientkey.HeaderNone}, // a trusted peer is its own client
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &clientkey.Resolver{Trusted: trusted, Header: tc.header}
			checkAccessClients(t, res, tc.header != clientkey.HeaderNone)
		})
	}
}

// accessCase is one request's RemoteAddr and X-Forwarded-For, and the
// client its line must name.
type accessCase struct{ remoteAddr, xff, Client string }

func checkAccessClients(t *testing.T, res *clientkey.Resolver, readsHeader bool) {
	var cases []accessCase
	via := func(remoteAddr, peer, xff, named string) accessCase {
		if readsHeader {
			return accessCase{remoteAddr, xff, named}
		}
		return accessCase{remoteAddr, xff, peer}
	}
	for round := range 3 {
		for i := range 3 * accesslog.ClientSlots {
			v4 := fmt.Sprintf("192.0.%d.%d", i/250, i%250)
			v6 := fmt.Sprintf("2001:db8::%x", i)
			xff := fmt.Sprintf("198.51.%d.%d", i/250, i%250)
			if i%2 == 0 {
				cases = append(cases, accessCase{v4 + ":" + fmt.Sprint(1000+i), "", v4})
			} else {
				// A client's own X-Forwarded-For is not believed.
				cases = append(cases, accessCase{"[" + v6 + "]:443", xff, v6})
			}
			cases = append(cases,
				via("10.0.0.1:40000", "10.0.0.1", xff, xff),
				via("[fd00::1]:40000", "fd00::1", "203.0.113.9, "+xff+", 10.1.1.1", xff))
			switch {
			case i%97 == round:
				cases = append(cases, via("10.0.0.1:40000", "10.0.0.1", "", "10.0.0.1"))
			case i%89 == round:
				cases = append(cases, via("10.0.0.1:40000", "10.0.0.1", "unknown", "10.0.0.1"))
			}
		}
		cases = append(cases, accessCase{"192.0.2.77", "", "192.0.2.77"}, accessCase{"@", "", "-"})
	}
	var out lineRecorder
	level := new(slog.LevelVar)
	lb := accesslog.NewLineBuffer(&out)
	a := &accesslog.Logger{Log: accesslog.NewLogger(config.Log{Format: config.LogText}, lb, level), Out: lb, Level: level}
	o := Opts{Listener: "web", Log: a, Clients: accesslog.NewClients(res)}
	start := time.Now()
	for _, c := range cases {
		r := httptest.NewRequest("GET", "http://h/", nil)
		r.RemoteAddr = c.remoteAddr
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		logAccess(&o, r, &State{}, 200, start, start)
	}
	lb.Flush()
	lines := strings.Split(strings.TrimSuffix(strings.Join(out.got(), ""), "\n"), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("%d lines for %d requests", len(lines), len(cases))
	}
	for i, c := range cases {
		want := " client=" + c.Client + " peer=" + c.remoteAddr + " "
		if !strings.Contains(lines[i], want) {
			t.Fatalf("line %d, RemoteAddr %s, X-Forwarded-For %q:\n%s\nwant %q", i, c.remoteAddr, c.xff, lines[i], want)
		}
	}
}
