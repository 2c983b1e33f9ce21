package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/limit/limittest"
)

// TestReclaimEndsTheExchange holds two exchanges past ReclaimAfter (fake
// time): one waiting on its own work, one writing to a client that stopped
// reading. The reclaim must end both, not just stop counting them, so that
// the key cannot run more exchanges than its limit.
func TestReclaimEndsTheExchange(t *testing.T) {
	clock := limittest.NewClock()
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 2, ReclaimAfter: time.Minute}, Clock: clock})
	causes := make(chan error, 2)
	writing := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/wait", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		causes <- r.Context().Err()
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 64<<10)
		close(writing)
		for {
			if _, err := w.Write(chunk); err != nil {
				causes <- err
				return
			}
		}
	})
	ts := startServer(t, l.Wrap(mux))

	waitDone := make(chan int, 1)
	go func() {
		code, _ := getStatus(t.Context(), clientFrom(t, "127.0.0.2"), ts.URL+"/wait")
		waitDone <- code
	}()
	// A client that asks for a large body and never reads it.
	conn, err := dialerFrom("127.0.0.2").Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	<-writing
	waitFor(t, "both exchanges to hold their permits", func() bool { return l.Totals().InUse == 2 })

	clock.Advance(2 * time.Minute)
	for range 2 {
		select {
		case err := <-causes:
			if !errors.Is(err, context.Canceled) && !isDeadline(err) {
				t.Errorf("the exchange ended with %v, want its context cancelled or a deadline", err)
			}
		case <-time.After(waitLimit):
			t.Fatal("a reclaimed exchange went on")
		}
	}
	if got := l.Totals(); got.Reclaimed != 2 {
		t.Errorf("totals %+v, want 2 reclaimed", got)
	}
	select {
	case <-waitDone:
	case <-time.After(waitLimit):
		t.Fatal("the waiting client was not answered")
	}
	_, _ = io.Copy(io.Discard, conn) // the server closes the slow reader's connection
	expectIdle(t, l)
}

func isDeadline(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}
