package grpclimit_test

import (
	"net"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/grpclimit"
)

// connlimit under grpc.Server.Serve: a client over its connection cap is
// refused at accept, and grpc.Server goes on serving the others; the
// per-call limits still apply on the connections admitted.
func TestConnlimitUnderServe(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	capped, err := connlimit.NewListener(inner, connlimit.Config{Policy: connlimit.Policy{Permits: 2}, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, grpclimit.Config{Policy: grpclimit.Policy{Permits: 8}})
	svc := newService()
	addr := serve(t, svc, capped, grpclimit.ServerOptions(l)...)

	// Two connections from 127.0.0.2, each holding a call.
	var running []<-chan error
	for range 2 {
		running = append(running, startUnary(callCtx(t), dialFrom(t, "127.0.0.2", addr), ""))
	}
	waitFor(t, "two calls running", func() bool { return svc.running.Load() == 2 })
	if open := capped.Stats().Open; open != 2 {
		t.Fatalf("%d connections open, want 2", open)
	}

	// A third connection from the same client is closed at accept: its
	// call fails without reaching the server's transport.
	err = result(t, startUnary(callCtx(t), dialFrom(t, "127.0.0.2", addr), "", waitForReadyOff()...))
	wantCode(t, err, codes.Unavailable)
	if got := capped.Stats().Refused.ClientCap; got == 0 {
		t.Fatal("no connection refused at the client cap")
	}
	if n := svc.entered.Load(); n != 2 {
		t.Fatalf("handler entered %d times, want 2", n)
	}

	// Another client is served meanwhile.
	other := startUnary(callCtx(t), dialFrom(t, "127.0.0.3", addr), "")
	waitFor(t, "the other client's call running", func() bool { return svc.running.Load() == 3 })
	if snap := capped.Snapshot(0); len(snap.Keys) != 2 || snap.Keys[0].Key.String() != "127.0.0.2" || snap.Keys[0].InUse != 2 {
		t.Fatalf("connection snapshot %+v", snap.Keys)
	}
	svc.open()
	for _, c := range append(running, other) {
		if err := result(t, c); err != nil {
			t.Fatal(err)
		}
	}
	waitIdle(t, l)
}
