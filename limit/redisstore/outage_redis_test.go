package redisstore_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/redistest"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
)

// lockedBuffer is a log destination several goroutines write to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Three Stores on one Redis client share an OutageLog: stopping Redis opens
// all three breakers and is logged once, and so is its return.
func TestOutageLoggedOnceForStoresOfOneRedis(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	outages := redisstore.NewOutageLog(logger)
	names := []string{"web/connections", "web/api/limit", "web/client_limit"}
	var nodes []node
	for _, name := range names {
		nodes = append(nodes, newNode(t, "", redisstore.Config{
			Client: client, Prefix: "outage:" + name + ":", Name: name, Outages: outages, Logger: logger,
			Lease: 900 * time.Millisecond, OnError: redisstore.Closed, BreakerThreshold: 2, BreakerBackoff: 200 * time.Millisecond,
		}, limit.Config[string]{Permits: 4}))
	}
	ctx := context.Background()
	try := func(n node) {
		if p, err := n.l.Acquire(ctx, "k"); err == nil {
			p.Release()
		}
	}
	for _, n := range nodes {
		try(n)
	}

	srv.Stop()
	waitFor(t, "every breaker open", 5*time.Second, func() bool {
		open := 0
		for _, n := range nodes {
			try(n)
			if n.st.Stats().Breaker != redisstore.BreakerClosed {
				open++
			}
		}
		return open == len(nodes)
	})
	srv.Restart()
	waitFor(t, "every breaker closed", 5*time.Second, func() bool {
		closed := 0
		for _, n := range nodes {
			try(n)
			if n.st.Stats().Breaker == redisstore.BreakerClosed {
				closed++
			}
		}
		return closed == len(nodes)
	})
	out := logs.String()
	if n := strings.Count(out, "redis unavailable"); n != 1 {
		t.Errorf("%d outage lines for one outage of three stores, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "reachable again"); n != 1 || !strings.Contains(out, "count=3") {
		t.Errorf("%d recovery lines (want 1, naming 3 stores):\n%s", n, out)
	}
	for _, name := range names {
		if !strings.Contains(out, name) {
			t.Errorf("the log does not name %s:\n%s", name, out)
		}
	}
}
