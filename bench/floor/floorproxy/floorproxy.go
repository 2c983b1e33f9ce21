// Package floorproxy is the least a Go reverse proxy can do per keep-alive
// request: a measuring stick for the daemon's data path (bench/floor and
// internal/daemon's BenchmarkDaemon run it), never a proxy to deploy.
//
// Each client connection has one goroutine and one upstream connection of
// its own. A request head is read into a buffer and sent upstream as it
// came; the response (its head read up to the blank line, its body by
// Content-Length) is written back; all on that goroutine, with the system
// calls the daemon makes per request: a read of the request, a write
// upstream, a read of the answer, a write to the client, and optionally the
// daemon's non-blocking peek at a kept upstream connection. Nothing else is
// parsed, checked, limited or logged. What the daemon spends per request
// above this floor is its own work (HTTP objects, limits, routing, metrics);
// what the floor spends is the Go runtime's and the kernel's share.
//
// [ServeAdmitting] adds to the probing floor the admission work a data path
// working on bytes would still do (see [Admission]).
//
// Only bodyless requests and responses with a Content-Length are relayed,
// as the benchmarks send and their backend answers; anything else closes
// the connection.
package floorproxy

import (
	"bytes"
	"errors"
	"net"
	"strconv"
)

// Serve accepts connections on ln and relays each one's requests to
// upstream (HOST:PORT), on a goroutine per connection, until ln is closed.
// With probe, a kept upstream connection is peeked at before each reuse,
// as internal/upstream does.
func Serve(ln net.Listener, upstream string, probe bool) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go serve(c, upstream, probe)
	}
}

// serve relays the requests of client c until either side closes or
// misbehaves.
func serve(c net.Conn, upstream string, probe bool) {
	defer c.Close()
	var up net.Conn
	defer func() {
		if up != nil {
			up.Close()
		}
	}()
	in := make([]byte, 8<<10)
	out := make([]byte, 16<<10)
	var peek *peeker
	for {
		n, err := readHead(c, in)
		if err != nil {
			return
		}
		switch {
		case up == nil:
			if up, err = net.Dial("tcp", upstream); err != nil {
				return
			}
			if probe {
				if peek, err = newPeeker(up); err != nil {
					return
				}
			}
		case peek != nil && !peek.idle():
			return
		}
		if _, err := up.Write(in[:n]); err != nil {
			return
		}
		m, err := readResponse(up, out)
		if err != nil {
			return
		}
		if _, err := c.Write(out[:m]); err != nil {
			return
		}
	}
}

var errTooLarge = errors.New("floor: message larger than the buffer")

// readHead reads one request head into buf and returns its length.
func readHead(c net.Conn, buf []byte) (int, error) {
	n := 0
	for {
		if n == len(buf) {
			return 0, errTooLarge
		}
		m, err := c.Read(buf[n:])
		if err != nil {
			return 0, err
		}
		n += m
		if i := bytes.Index(buf[:n], []byte("\r\n\r\n")); i >= 0 {
			if i+4 != n {
				return 0, errors.New("floor: pipelining or a body")
			}
			return n, nil
		}
	}
}

// readResponse reads one response, head and Content-Length body, into buf.
func readResponse(c net.Conn, buf []byte) (int, error) {
	n, end := 0, -1
	for {
		if n == len(buf) {
			return 0, errTooLarge
		}
		m, err := c.Read(buf[n:])
		if err != nil {
			return 0, err
		}
		n += m
		if end < 0 {
			i := bytes.Index(buf[:n], []byte("\r\n\r\n"))
			if i < 0 {
				continue
			}
			length, err := contentLength(buf[:i])
			if err != nil {
				return 0, err
			}
			end = i + 4 + length
		}
		if n >= end {
			if n > end {
				return 0, errors.New("floor: bytes after the response")
			}
			return n, nil
		}
	}
}

func contentLength(head []byte) (int, error) {
	for _, line := range bytes.Split(head, []byte("\r\n"))[1:] {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if ok && bytes.EqualFold(name, []byte("Content-Length")) {
			n, err := strconv.Atoi(string(bytes.TrimSpace(value)))
			if err != nil || n < 0 {
				return 0, errors.New("floor: bad Content-Length")
			}
			return n, nil
		}
	}
	return 0, errors.New("floor: no Content-Length")
}
