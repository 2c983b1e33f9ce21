package grpclimit_test

import (
	"net"
	"sync/atomic"
	"testing"
)

// countingListener counts the connections its listener accepts.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (c *countingListener) listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.Listener = ln
	return c
}

func (c *countingListener) Accept() (net.Conn, error) {
	conn, err := c.Listener.Accept()
	if err == nil {
		c.n.Add(1)
	}
	return conn, err
}
