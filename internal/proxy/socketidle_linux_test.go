package proxy

import (
	"net"
	"testing"
	"time"
)

// The kernel tells how long a socket has carried no data, either way, and
// a byte either way starts the count again.
func TestSocketIdleFromKernel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	const pause = 300 * time.Millisecond
	idleAfterPause := func(what string) {
		t.Helper()
		time.Sleep(pause)
		d, ok := socketIdle(server)
		if !ok {
			t.Fatal("no TCP_INFO for a TCP socket on Linux")
		}
		if d < pause-kernelTick {
			t.Fatalf("%s: idle %v after a pause of %v", what, d, pause)
		}
	}
	idleAfterPause("new connection")
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := server.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if d, _ := socketIdle(server); d >= pause {
		t.Fatalf("idle %v right after receiving a byte", d)
	}
	idleAfterPause("after receiving")
	if _, err := server.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	if d, _ := socketIdle(server); d >= pause {
		t.Fatalf("idle %v right after sending a byte", d)
	}
	if _, ok := socketIdle(fakeNetConn{}); ok {
		t.Fatal("socketIdle claims to know the idle time of a connection without a socket")
	}
}

// kernelTick bounds the kernel's rounding of TCP_INFO times (jiffies).
const kernelTick = 20 * time.Millisecond

type fakeNetConn struct{ net.Conn }
