package floorproxy

import (
	"os"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// startEpoll serves ServeEpoll with two workers in front of a backend and
// returns its address and stop.
func startEpoll(t *testing.T) (string, func()) {
	t.Helper()
	upstream, ln := startBackend(t, 0)
	stop, err := ServeEpoll(ln, upstream, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// TestEpollRelaysKeepAliveRequests: requests on several connections, each
// kept alive, get the backend's whole answer, whichever worker took them.
func TestEpollRelaysKeepAliveRequests(t *testing.T) {
	addr, _ := startEpoll(t)
	for range 4 {
		getWhole(t, addr, "GET / HTTP/1.1\r\nHost: floor.test\r\n\r\n", 3)
	}
}

func TestEpollClosesOnWhatItDoesNotRelay(t *testing.T) {
	addr, _ := startEpoll(t)
	expectClosed(t, addr, "POST / HTTP/1.1\r\nHost: floor.test\r\nContent-Length: 2\r\n\r\nhi")
}

// TestEpollStopClosesEverything: stop closes the connections the workers
// hold and leaves no descriptor of theirs open.
func TestEpollStopClosesEverything(t *testing.T) {
	before := openFDs(t)
	addr, stop := startEpoll(t)
	c := dialFor(t, addr)
	defer c.Close()
	getWhole(t, addr, "GET / HTTP/1.1\r\nHost: floor.test\r\n\r\n", 1)
	stop()
	var buf [1]byte
	if n, err := c.Read(buf[:]); err == nil {
		t.Fatalf("read %d bytes from a connection stop should have closed", n)
	}
	// The listener and the backend are still open, closed by Cleanup: at
	// most theirs (listener, backend listener, its connections) remain.
	if !waitfor.Until(5*time.Second, func() bool { return openFDs(t) <= before+4 }) {
		t.Fatalf("%d descriptors open after stop, %d before start", openFDs(t), before)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
