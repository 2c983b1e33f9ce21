package siege

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
)

// newDialer returns a dialer whose connections leave from src.
func newDialer(src netip.Addr) *net.Dialer {
	return &net.Dialer{
		LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)),
		KeepAlive: -1, // runs are short; probes would only add traffic
		Control:   bindNoPort,
	}
}

// longAgo is a deadline in the past: setting it wakes a blocked Read or Write.
var longAgo = time.Unix(1, 0)

// errKind is how a failed request or connection is counted.
type errKind int

const (
	kindTimeout errKind = iota
	kindRefused
	kindReset
	kindEOF
	kindOther
)

// classify sorts a network error into the kinds the report counts.
func classify(err error) errKind {
	var ne net.Error
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return kindTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return kindRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return kindReset
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return kindEOF
	}
	return kindOther
}
