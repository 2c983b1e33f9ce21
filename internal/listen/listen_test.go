package listen_test

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/listen"
)

// HTTP listeners accept with TCP keep-alive off (their timeouts end silent
// clients, and refusals skip the setsockopt calls); tcp listeners keep it.
func TestListenTCPKeepAlive(t *testing.T) {
	cases := []struct {
		protocol config.Protocol
		want     bool
	}{
		{config.ProtocolHTTP, false},
		{config.ProtocolHTTPS, false},
		{config.ProtocolTCP, true},
	}
	for _, tc := range cases {
		t.Run(string(tc.protocol), func(t *testing.T) {
			ln, err := listen.ListenTCP(config.Listener{Protocol: tc.protocol, Listen: "127.0.0.1:0"})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
			s, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := keepAliveOn(t, s.(*net.TCPConn)); got != tc.want {
				t.Fatalf("SO_KEEPALIVE on an accepted %s connection = %v, want %v", tc.protocol, got, tc.want)
			}
		})
	}
}

func keepAliveOn(t *testing.T, c *net.TCPConn) bool {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		v, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return v != 0
}
