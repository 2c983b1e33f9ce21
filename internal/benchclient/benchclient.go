// Package benchclient is the load of the HTTP/1.1 benchmarks: keep-alive
// connections that send one fixed request head and read each response
// without allocating, driven from one goroutine per connection.
package benchclient

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ErrBadResponse is returned for a response other than a 200 with a
// Content-Length.
var ErrBadResponse = errors.New("benchclient: bad response")

// A Conn is a keep-alive connection that sends request, one at a time.
type Conn struct {
	c       net.Conn
	br      *bufio.Reader
	request string
}

// NewConn returns a Conn sending request (a whole request head, without a
// body) over c.
func NewConn(c net.Conn, request string) *Conn {
	return &Conn{c: c, br: bufio.NewReaderSize(c, 4096), request: request}
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Do sends the request once and reads its response, which must be a 200
// with a Content-Length.
func (c *Conn) Do() error {
	if _, err := io.WriteString(c.c, c.request); err != nil {
		return err
	}
	cl := -1
	for first := true; ; first = false {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if first {
			if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
				return fmt.Errorf("%w: %q", ErrBadResponse, line)
			}
			continue
		}
		if len(line) <= 2 {
			break
		}
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(k, []byte("Content-Length")) {
			cl, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	if cl < 0 {
		return fmt.Errorf("%w: no Content-Length", ErrBadResponse)
	}
	_, err := c.br.Discard(cl)
	return err
}

// Drive sends n requests over conns, one goroutine per connection, and
// returns the wall time it took. A failed request fails tb and stops its
// connection.
func Drive(tb testing.TB, conns []*Conn, n int) time.Duration {
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	start := time.Now()
	for _, c := range conns {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := c.Do(); err != nil {
					tb.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}
