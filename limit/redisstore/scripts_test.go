package redisstore

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/internal/redistest"
)

// The epoch rules of the scripts, step by step against a real Redis: an
// absolute write never erases an acquire that its snapshot did not count,
// and a late (stale) write changes nothing.
func TestScriptEpochs(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	st, err := New[string](Config{Client: client, NodeID: "n", Prefix: "e:", Lease: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	const name = "e:{k}"
	count := func() int {
		n, _ := client.HGet(ctx, name, "c:n").Int()
		return n
	}
	acquire := func(epoch int64) {
		t.Helper()
		r, err := st.runAcquire(ctx, name, 100, epoch, 0, 0, "k")
		if err != nil || !r.granted {
			t.Fatalf("acquire(epoch %d): %+v, %v", epoch, r, err)
		}
	}
	write := func(mode string, n int, epoch int64) {
		t.Helper()
		calls := []syncCall{{name: name, mode: mode, n: n, epoch: epoch, message: "k"}}
		if err := st.runSync(ctx, calls); err != nil {
			t.Fatalf("sync %s %d @%d: %v", mode, n, epoch, err)
		}
	}
	steps := []struct {
		name string
		do   func()
		want int
	}{
		{"acquire of epoch 10", func() { acquire(10) }, 1},
		{"snapshot 11 counts it", func() { write("a", 1, 11) }, 1},
		{"acquire after snapshot 12, before its write", func() { acquire(12) }, 2},
		{"write of snapshot 12 (n=1) keeps that acquire", func() { write("a", 1, 12) }, 2},
		{"acquire of epoch 12 after the write adds", func() { acquire(12) }, 3},
		{"stale write of snapshot 11 is ignored", func() { write("a", 0, 11) }, 3},
		{"release delta taken before snapshot 12 was written: ignored", func() { write("d", -1, 11) }, 3},
		{"release delta after snapshot 12", func() { write("d", -1, 12) }, 2},
		{"delta never goes below zero", func() { write("d", -5, 12) }, 0},
		{"acquire of epoch 13", func() { acquire(13) }, 1},
		{"snapshot 14 with the acquire in flight counted", func() { write("a", 1, 14) }, 1},
		{"acquire carrying a release of epoch 14", func() {
			if r, err := st.runAcquire(ctx, name, 100, 14, -1, 0, "k"); err != nil || !r.granted || r.mine != 1 {
				t.Fatalf("acquire with delta: %+v, %v", r, err)
			}
		}, 1},
		{"acquire carrying a stale release (epoch 13) ignores it", func() {
			if r, err := st.runAcquire(ctx, name, 100, 13, -1, 0, "k"); err != nil || !r.granted || r.mine != 2 {
				t.Fatalf("acquire with stale delta: %+v, %v", r, err)
			}
		}, 2},
		{"absolute zero removes the node", func() { write("a", 0, 15) }, 0},
	}
	for _, s := range steps {
		s.do()
		if got := count(); got != s.want {
			t.Fatalf("%s: count %d, want %d", s.name, got, s.want)
		}
	}
	if n, _ := client.Exists(ctx, name).Result(); n != 0 {
		fields, _ := client.HGetAll(ctx, name).Result()
		t.Fatalf("hash left after the node's count went to zero: %v", fields)
	}
}

// Acquires that a snapshot counted while they were in flight, step by
// step: granted before the snapshot's write, the write's count holds them
// once; granted after it, Redis counts them twice and the reply says so
// (stale, with the write's epoch), which the node answers with a delta of
// -1; acquires tagged with the write's own epoch are never stale.
func TestScriptInFlightAcquires(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	st, err := New[string](Config{Client: client, NodeID: "n", Prefix: "f:", Lease: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	const name = "f:{k}"
	acquire := func(epoch int64, stale bool, ae int64) func() {
		return func() {
			t.Helper()
			r, err := st.runAcquire(ctx, name, 100, epoch, 0, 0, "k")
			if err != nil || !r.granted || r.stale != stale || (stale && r.ae != ae) {
				t.Fatalf("acquire(epoch %d): %+v, %v; want stale %v (ae %d)", epoch, r, err, stale, ae)
			}
		}
	}
	write := func(mode string, n int, epoch int64) func() {
		return func() {
			t.Helper()
			if err := st.runSync(ctx, []syncCall{{name: name, mode: mode, n: n, epoch: epoch, message: "k"}}); err != nil {
				t.Fatalf("sync %s %d @%d: %v", mode, n, epoch, err)
			}
		}
	}
	steps := []struct {
		name string
		do   func()
		want int // the node's count in Redis after the step; it holds want too
	}{
		{"snapshot 20 of one held", write("a", 1, 20), 1},
		{"acquire of epoch 20 after its write", acquire(20, false, 0), 2},
		{"snapshot 21: 2 held and one of epoch 20 in flight", write("a", 3, 21), 3},
		{"that acquire granted after the write: stale", acquire(20, true, 21), 4},
		{"the node takes the second count off", write("d", -1, 21), 3},
		{"acquire of epoch 21 after its write", acquire(21, false, 0), 4},
		{"acquire of epoch 22 before its write", acquire(22, false, 0), 5},
		{"acquire of epoch 21, in flight at snapshot 22, before its write", acquire(21, false, 0), 6},
		{"snapshot 22: 4 held and one in flight; adds the one of epoch 22", write("a", 5, 22), 6},
		{"acquire of epoch 21 still in flight at 22, after its write: stale", acquire(21, true, 22), 7},
		{"the node takes the second count off", write("d", -1, 22), 6},
		{"absolute zero removes the node", write("a", 0, 23), 0},
	}
	for _, s := range steps {
		s.do()
		n, _ := client.HGet(ctx, name, "c:n").Int()
		if n != s.want {
			t.Fatalf("%s: count %d, want %d", s.name, n, s.want)
		}
	}
	if n, _ := client.Exists(ctx, name).Result(); n != 0 {
		fields, _ := client.HGetAll(ctx, name).Result()
		t.Fatalf("hash left after the node's count went to zero: %v", fields)
	}
}

// An acquire that takes permits for the acquires waiting on it takes as
// many as the limit leaves, never more, and counts them with its own.
func TestScriptExtraPermitsWithinLimit(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	st, err := New[string](Config{Client: client, NodeID: "n", Prefix: "x:", Lease: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	const name = "x:{k}"
	future := time.Now().Add(time.Hour).UnixMilli()
	client.HSet(ctx, name, "c:o", 1, "e:o", future)
	r, err := st.runAcquire(ctx, name, 4, 1, 0, 5, "k")
	if err != nil || !r.granted || r.got != 2 || r.mine != 3 || r.others != 1 {
		t.Fatalf("acquire with 5 extra under a limit of 4, 1 held elsewhere: %+v, %v; want granted, 2 extra, mine 3", r, err)
	}
	if r, err := st.runAcquire(ctx, name, 4, 1, 0, 5, "k"); err != nil || r.granted || r.got != 0 || r.mine != 3 {
		t.Fatalf("acquire at the limit: %+v, %v; want refused, nothing taken", r, err)
	}
	// The write of snapshot 1 adds the 3 acquired under its epoch.
	if err := st.runSync(ctx, []syncCall{{name: name, mode: "a", n: 0, epoch: 1, message: "k"}}); err != nil {
		t.Fatal(err)
	}
	if n, _ := client.HGet(ctx, name, "c:n").Int(); n != 3 {
		t.Fatalf("count after the write of snapshot 1: %d, want 3", n)
	}
}

// Expired fields of other nodes are dropped by the next script and do not
// count.
func TestScriptDropsExpiredNodes(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	st, err := New[string](Config{Client: client, NodeID: "n", Prefix: "e:", Lease: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	const name = "e:{k}"
	future := time.Now().Add(time.Hour).UnixMilli()
	client.HSet(ctx, name, "c:dead", 5, "e:dead", 1, "ae:dead", 3, "ac:dead", 1, "c:live", 2, "e:live", future)
	r, err := st.runAcquire(ctx, name, 3, 1, 0, 0, "k")
	if err != nil || !r.granted || r.others != 2 || r.mine != 1 {
		t.Fatalf("acquire: %+v, %v; want granted with others=2 (the dead node dropped)", r, err)
	}
	fields, _ := client.HGetAll(ctx, name).Result()
	for _, f := range []string{"c:dead", "e:dead", "ae:dead", "ac:dead"} {
		if _, ok := fields[f]; ok {
			t.Fatalf("expired field %s still there: %v", f, fields)
		}
	}
	if r, _ := st.runAcquire(ctx, name, 3, 1, 0, 0, "k"); r.granted {
		t.Fatal("granted over the limit: live 2 + mine 1 = 3")
	}
	if fields, _ := client.HGetAll(ctx, name).Result(); fields["w"] == "" {
		t.Fatal("a refusal did not mark the key as waited on")
	}
}

// Releases publish only while the key is marked as waited on, and only
// when the node's count fell overall.
func TestScriptNotifies(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	st, err := New[string](Config{Client: client, NodeID: "n", Prefix: "e:", Lease: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	sub := client.Subscribe(ctx, st.s.channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription confirmation
		t.Fatal(err)
	}
	msgs := sub.Channel()
	const name = "e:{k}"
	published := func() bool {
		// Redis delivers messages in order: the marker published after
		// the step comes after anything the step published.
		if err := client.Publish(ctx, st.s.channel, "marker").Err(); err != nil {
			t.Fatal(err)
		}
		got := false
		for {
			select {
			case m := <-msgs:
				if m.Payload == "marker" {
					return got
				}
				got = got || m.Payload == "k"
			case <-time.After(2 * time.Second):
				t.Fatal("no marker message")
			}
		}
	}
	release := func(d int) {
		if err := st.runSync(ctx, []syncCall{{name: name, mode: "d", n: d, message: "k"}}); err != nil {
			t.Fatal(err)
		}
	}
	acquire := func(d int) bool {
		r, err := st.runAcquire(ctx, name, 1, 0, d, 0, "k")
		if err != nil {
			t.Fatal(err)
		}
		return r.granted
	}
	steps := []struct {
		name    string
		do      func()
		publish bool
	}{
		{"grant", func() { acquire(0) }, false},
		{"release of an unwatched key", func() { release(-1) }, false},
		{"grant again", func() { acquire(0) }, false},
		{"refusal marks the key", func() {
			if acquire(0) {
				t.Fatal("granted over a limit of 1")
			}
		}, false},
		{"release and retake in one acquire: no net release", func() {
			if !acquire(-1) {
				t.Fatal("not granted after its own release")
			}
		}, false},
		{"release of the watched key", func() { release(-1) }, true},
	}
	for _, s := range steps {
		s.do()
		if got := published(); got != s.publish {
			t.Fatalf("%s: published %v, want %v", s.name, got, s.publish)
		}
	}
}
