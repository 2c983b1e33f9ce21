package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/seed-a07d1050/portcullis/internal/httpfield"
)

// responseCorpus are response heads (and bodies) of every kind: the common
// ones readResponse reads itself, and the rare and malformed ones it must
// leave to http.ReadResponse, which must then decide as it always did.
var responseCorpus = []string{
	"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA",
	"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 \r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\nX-A: 1\r\nX-A: 2\r\nx-lower: v\r\n\r\nnot",
	"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 10\r\n\r\nshort",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive, Close\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nContent-Length:    5   \r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nContent-Length: 007\r\n\r\n1234567",
	"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
	"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nContent-Length: 999999999999999999\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTrailer: X-T\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\n\r\nclose-delimited body",
	"HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\nclose-delimited body",
	"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.0 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello",
	"HTTP/1.2 200 OK\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/2.0 200 OK\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
	"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n",
	"HTTP/1.1 199 Odd\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 600 Beyond\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 099 Low\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 +20 Sign\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 20 Short\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 2000 Long\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1  200 Two spaces\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200\tTab\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\n\r\nok",
	"HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX-A: a\x7fb\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX-A: caf\xc3\xa9\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX-A: \ttabbed\t \r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX-A:\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX-A: folded\r\n  more\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\n Leading: space\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX A: space in name\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX-A : space before colon\r\nContent-Length: 2\r\n\r\nok",
	// Refused (ErrMalformedResponse): net/http reads a field "Content-Length "
	// and frames the body until the connection closes (issue 35).
	"HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding : chunked\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\n: no name\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nno colon\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX_Under_Score: v\r\nx-mIxEd-CaSe: v\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX\xffA: bad name\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n",
	"HTTP/1.1 200 OK\r\n",
	"HTTP/1.1 200 OK",
	"HTTP/1.1",
	"",
	"garbage\r\n\r\n",
	"\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbodyHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
}

// readerKinds feed an input to a bufio.Reader whole, a byte at a time, or
// in pieces of 7 bytes, so that both the buffered head and the head that
// arrives in parts are read.
var readerKinds = []struct {
	name string
	wrap func([]byte) io.Reader
}{
	{"whole", func(b []byte) io.Reader { return bytes.NewReader(b) }},
	{"bytewise", func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) }},
	{"pieces", func(b []byte) io.Reader { return &pieceReader{b: b, n: 7} }},
}

type pieceReader struct {
	b []byte
	n int
}

func (r *pieceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.n)], r.b)
	r.b = r.b[n:]
	return n, nil
}

// readOutcome is everything a caller can see of reading one response:
// the Response's fields, its body and how that ended, and what was left
// in the reader.
type readOutcome struct {
	Err                                string
	Status, Proto                      string
	StatusCode, ProtoMajor, ProtoMinor int
	Header, Trailer                    http.Header
	ContentLength                      int64
	TransferEncoding                   []string
	Close, Uncompressed, NoBody        bool
	Body, BodyErr, Rest                string
	RequestIsReq                       bool
}

func readWith(read func(*bufio.Reader, *http.Request) (*http.Response, error), in []byte, wrap func([]byte) io.Reader, method string) readOutcome {
	br := bufio.NewReaderSize(wrap(in), 4096)
	req := &http.Request{Method: method}
	resp, err := read(br, req)
	if err != nil {
		return readOutcome{Err: err.Error()}
	}
	o := readOutcome{
		Status: resp.Status, Proto: resp.Proto, StatusCode: resp.StatusCode,
		ProtoMajor: resp.ProtoMajor, ProtoMinor: resp.ProtoMinor, Header: resp.Header,
		ContentLength: resp.ContentLength, TransferEncoding: resp.TransferEncoding,
		Close: resp.Close, Uncompressed: resp.Uncompressed, NoBody: resp.Body == http.NoBody,
		RequestIsReq: resp.Request == req,
	}
	body, err := io.ReadAll(resp.Body)
	o.Body = string(body)
	if err != nil {
		o.BodyErr = err.Error()
	}
	o.Trailer = resp.Trailer
	rest, _ := io.ReadAll(br)
	o.Rest = string(rest)
	return o
}

// readMap is readResponse with the header in a map, its Request set to
// req as the exchange sets it.
func readMap(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	resp, err := readResponse(br, req.Method, nil)
	if resp != nil {
		if resp.Request != nil {
			return nil, errors.New("readResponse set the response's Request")
		}
		resp.Request = req
	}
	return resp, err
}

// readFields is readResponse asked for the header as a list of fields,
// the list then added to a map when it is the header (resp.Header nil),
// so that its result compares with http.ReadResponse's. The list starts
// with a stale field, which must not survive.
func readFields(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	fields := []httpfield.Field{{Name: "Stale", Value: "from an earlier response"}}
	resp, err := readResponse(br, req.Method, &fields)
	if resp != nil {
		if resp.Request != nil {
			return nil, errors.New("readResponse set the response's Request")
		}
		resp.Request = req
	}
	if resp != nil && resp.Header == nil {
		resp.Header = http.Header{}
		for _, f := range fields {
			resp.Header[f.Name] = append(resp.Header[f.Name], f.Value)
		}
	}
	return resp, err
}

// readResponseStrict is http.ReadResponse with readResponse's one
// departure from it: a field name that is not a token refuses the head
// (checkFieldNames; RFC 9112 §5.1, issue 35).
func readResponseStrict(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	resp, err := http.ReadResponse(br, req)
	if err == nil {
		if err := checkFieldNames(resp.Header); err != nil {
			return nil, err
		}
	}
	return resp, err
}

// checkSameAsNetHTTP fails t unless readResponse, with the header in a map
// and as a list of fields, and http.ReadResponse read in the same way for
// every reader kind and request method.
func checkSameAsNetHTTP(t *testing.T, in []byte) {
	t.Helper()
	for _, kind := range readerKinds {
		for _, method := range []string{"GET", "HEAD", "POST"} {
			want := readWith(readResponseStrict, in, kind.wrap, method)
			for _, read := range []struct {
				name string
				f    func(*bufio.Reader, *http.Request) (*http.Response, error)
			}{{"readResponse", readMap}, {"readResponse (fields)", readFields}} {
				got := readWith(read.f, in, kind.wrap, method)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s %s, %q:\n%s %+v\nhttp.ReadResponse %+v", kind.name, method, in, read.name, got, want)
				}
			}
		}
	}
}

// TestReadResponseMatchesNetHTTP is the differential test of readResponse:
// for every response of the corpus, and 4000 seeded mutations of them
// (bytes replaced, inserted, deleted; CR, LF, space, colon and digits
// favoured), it must return what http.ReadResponse returns, field for
// field, body and error included, and leave the same bytes unread.
func TestReadResponseMatchesNetHTTP(t *testing.T) {
	fast := 0
	for _, in := range responseCorpus {
		checkSameAsNetHTTP(t, []byte(in))
		if i := strings.Index(in, "\r\n\r\n"); i >= 0 && simpleResponse([]byte(in), "GET", nil) != nil {
			fast++
		}
	}
	if fast < 15 {
		t.Errorf("only %d corpus entries took the fast path; the test would not see it", fast)
	}
	rng := rand.New(rand.NewPCG(19, 2))
	special := []byte("\r\n :0123456789\t,-")
	for i := range 4000 {
		in := []byte(responseCorpus[rng.IntN(len(responseCorpus))])
		for range 1 + rng.IntN(3) {
			in = mutateOnce(rng, in, func() byte {
				if rng.IntN(2) == 0 {
					return special[rng.IntN(len(special))]
				}
				return byte(rng.IntN(256))
			})
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) { checkSameAsNetHTTP(t, in) })
	}
}

// mutateOnce changes in at a random place: one byte (from pick) set,
// inserted or removed.
func mutateOnce(rng *rand.Rand, in []byte, pick func() byte) []byte {
	pos := 0
	if len(in) > 0 {
		pos = rng.IntN(len(in))
	}
	c := pick()
	switch rng.IntN(3) {
	case 0:
		if len(in) > 0 {
			in[pos] = c
		}
	case 1:
		in = append(in[:pos], append([]byte{c}, in[pos:]...)...)
	case 2:
		if len(in) > 0 {
			in = append(in[:pos], in[pos+1:]...)
		}
	}
	return in
}

// TestReadResponseAllocations checks that the fast path is what it is for:
// far fewer allocations than http.ReadResponse on a common response.
func TestReadResponseAllocations(t *testing.T) {
	in := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nDate: Wed, 02 Dec 2026 09:00:00 GMT\r\nContent-Length: 13\r\n\r\nhello, world\n")
	req := &http.Request{Method: "GET"}
	measure := func(read func(*bufio.Reader, *http.Request) (*http.Response, error)) float64 {
		br := bufio.NewReaderSize(nil, 4096)
		r := bytes.NewReader(in)
		return testing.AllocsPerRun(200, func() {
			r.Reset(in)
			br.Reset(r)
			resp, err := read(br, req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
		})
	}
	fast, std := measure(readMap), measure(http.ReadResponse)
	if fast > 4 || fast >= std {
		t.Errorf("readResponse: %.0f allocations, http.ReadResponse %.0f; want at most 4 and fewer", fast, std)
	}
	t.Logf("allocations per response: readResponse %.0f, http.ReadResponse %.0f", fast, std)
}

// BenchmarkSimpleHeadReader reads an answer's head with a field list, as
// the event loops do, the same head each time (an upstream answering
// alike within a second) and a head whose Date differs from the last one
// read.
func BenchmarkSimpleHeadReader(b *testing.B) {
	const head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nDate: Wed, 02 Dec 2026 09:00:00 GMT\r\nContent-Length: 13\r\n\r\nhello, world\n"
	answers := [][]byte{[]byte(head), []byte(strings.Replace(head, "09:00:00", "09:00:01", 1))}
	for _, bc := range []struct {
		name  string
		every int // answers alternate every this many reads
	}{{"head=repeated", 1 << 62}, {"head=changing", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			var sr SimpleHeadReader
			var fields []httpfield.Field
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, _, ok := sr.Read(answers[i/bc.every%2], "GET", &fields); !ok {
					b.Fatal("the head was not read")
				}
				i++
			}
		})
	}
}

func BenchmarkReadResponse(b *testing.B) {
	in := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nDate: Wed, 02 Dec 2026 09:00:00 GMT\r\nContent-Length: 13\r\n\r\nhello, world\n")
	req := &http.Request{Method: "GET"}
	for _, bc := range []struct {
		name string
		read func(*bufio.Reader, *http.Request) (*http.Response, error)
	}{{"reader=fast", readMap}, {"reader=fields", readFieldsOnly}, {"reader=nethttp", http.ReadResponse}} {
		b.Run(bc.name, func(b *testing.B) {
			br := bufio.NewReaderSize(nil, 4096)
			r := bytes.NewReader(in)
			b.ReportAllocs()
			for b.Loop() {
				r.Reset(in)
				br.Reset(r)
				resp, err := bc.read(br, req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
			}
		})
	}
}

// FuzzReadResponse holds readResponse, with the header in a map and as a
// list of fields, to http.ReadResponse on arbitrary bytes: the same
// Response, body, error and unread bytes, for every reader kind and
// request method.
// ci:fuzztime 100000x: it reads what an upstream sends.
func FuzzReadResponse(f *testing.F) {
	for _, in := range responseCorpus {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkSameAsNetHTTP(t, in)
	})
}

// benchFields is the list readFieldsOnly reuses, as a proxy reuses one per
// connection.
var benchFields []httpfield.Field

// readFieldsOnly is readResponse with the header as a list of fields,
// reused from one response to the next.
func readFieldsOnly(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	return readResponse(br, req.Method, &benchFields)
}
