package siege

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"testing"
)

var responseSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nTrailer: x\r\n\r\nNEXT",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
	"HTTP/1.0 200 OK\r\n\r\nuntil the end",
	"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nokNEXT",
	"HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\nNEXT",
	"HTTP/1.1 304 Not Modified\r\n\r\n",
	"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200\nContent-Length: 1\n\nx",
	"HTTP/1.1 200 OK\r\nX: a\x01b\r\n\r\n",
	"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n",
	"HTTP/2.0 200 OK\r\n\r\n",
	"",
}

// FuzzReadResponse holds readResponse to net/http.ReadResponse as an oracle:
// whatever readResponse accepts, ReadResponse must accept with the same status,
// the same connection decision, and the same number of bytes consumed, so the
// two agree on where the next response on a keep-alive connection starts.
func FuzzReadResponse(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		src := bytes.NewReader(data)
		br := bufio.NewReaderSize(src, 512)
		got, err := readResponse(br)
		if err != nil {
			if !errors.Is(err, errMalformed) && err != io.EOF && err != io.ErrUnexpectedEOF {
				t.Fatalf("readResponse error %v is none of the documented kinds", err)
			}
			return
		}
		consumed := len(data) - br.Buffered() - src.Len()

		refSrc := bytes.NewReader(data)
		ref := bufio.NewReader(refSrc)
		want, err := http.ReadResponse(ref, &http.Request{Method: "GET"})
		if err != nil {
			t.Fatalf("readResponse accepted %q (status %d), net/http refused it: %v", data, got.status, err)
		}
		if _, err := io.Copy(io.Discard, want.Body); err != nil {
			t.Fatalf("readResponse accepted %q, net/http failed on the body: %v", data, err)
		}
		want.Body.Close()
		if got.status != want.StatusCode {
			t.Fatalf("status %d, net/http %d for %q", got.status, want.StatusCode, data)
		}
		if got.mustClose != want.Close && (got.status >= 200 || want.Close) {
			t.Fatalf("mustClose %v, net/http Close %v for %q", got.mustClose, want.Close, data)
		}
		refConsumed := len(data) - ref.Buffered() - refSrc.Len()
		if consumed != refConsumed {
			t.Fatalf("consumed %d bytes, net/http %d, of %q", consumed, refConsumed, data)
		}
	})
}
