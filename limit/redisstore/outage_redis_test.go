package redisstore_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/logtest"
	"github.com/seed-a07d1050/portcullis/internal/redistest"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
	"github.com/seed-a07d1050/portcullis/rate"
)

// lockedBuffer is a log destination several goroutines write to.
// (logtest.Buffer; the name stays while another branch edits these tests.)
type lockedBuffer = logtest.Buffer

// Three Stores and a RateStore on one Redis client share an OutageLog:
// stopping Redis opens all four breakers and is logged once, and so is its
// return.
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
		}, limit.Config[string]{Policy: limit.Policy[string]{Permits: 4}}))
	}
	rates := newRateNode(t, "", redisstore.RateConfig{
		Client: client, Prefix: "outage:rate:", Name: "web/rate", Outages: outages, Logger: logger,
		OnError: redisstore.Closed, BreakerThreshold: 2, BreakerBackoff: 200 * time.Millisecond,
	}, rate.Limit{Rate: rate.PerSecond(1000), Burst: 100})
	names = append(names, "web/rate")
	ctx := context.Background()
	try := func(n node) {
		if p, err := n.l.Acquire(ctx, "k"); err == nil {
			p.Release()
		}
	}
	tryRate := func() { _, _ = rates.l.Reserve(ctx, "k") }
	for _, n := range nodes {
		try(n)
	}
	tryRate()

	srv.Stop()
	waitFor(t, "every breaker open", 5*time.Second, func() bool {
		open := 0
		for _, n := range nodes {
			try(n)
			if n.st.Stats().Breaker != redisstore.BreakerClosed {
				open++
			}
		}
		tryRate()
		return open == len(nodes) && rates.st.Stats().Breaker != redisstore.BreakerClosed
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
		tryRate()
		return closed == len(nodes) && rates.st.Stats().Breaker == redisstore.BreakerClosed
	})
	out := logs.String()
	if n := strings.Count(out, "redis unavailable"); n != 1 {
		t.Errorf("%d outage lines for one outage of three stores, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "reachable again"); n != 1 || !strings.Contains(out, "count=4") {
		t.Errorf("%d recovery lines (want 1, naming 4 stores):\n%s", n, out)
	}
	for _, name := range names {
		if !strings.Contains(out, name) {
			t.Errorf("the log does not name %s:\n%s", name, out)
		}
	}
}
