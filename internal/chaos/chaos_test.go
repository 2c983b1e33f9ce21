package chaos

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/admin"
)

var (
	duration  = flag.Duration("chaos.duration", 15*time.Second, "how long TestChaos attacks the daemon")
	seedFlag  = flag.Uint64("chaos.seed", 0, "seed of TestChaos's random choices; 0 picks one from the clock")
	attackers = flag.Int("chaos.attackers", 16, "abusive clients TestChaos runs at once (1..250)")
	logDaemon = flag.Bool("chaos.log", false, "write the daemon's warnings and errors to stderr")
)

const (
	// legitPerListener is how many legitimate clients use each of the http
	// and https listeners.
	legitPerListener = 3
	// minSuccess is the share of legitimate requests that must succeed.
	minSuccess = 0.95
	// drainWait bounds the wait for every count to come back to zero after
	// the clients stopped: read_header_timeout (1s) and idle_timeout (3s)
	// end what the attackers left behind, with room for a loaded machine.
	drainWait = 15 * time.Second
	// stopWait bounds the wait for the clients to stop after the run.
	stopWait = actionLimit + 10*time.Second
	// leakWait bounds the wait for goroutines to end after everything closed.
	leakWait = 10 * time.Second
)

// TestChaos runs random abusive clients against the daemon for
// -chaos.duration while legitimate clients keep making requests, then
// checks that the legitimate clients were served throughout, that every
// count is back to zero and that no goroutine is left. See docs/chaos.md.
func TestChaos(t *testing.T) {
	seed := chooseSeed(t, "TestChaos", *duration)

	before := goroutines()
	e := startEnv(t)
	tal := newTally()
	start := time.Now()
	rec := newRecord(start)
	ctx, stop := context.WithDeadline(context.Background(), start.Add(*duration))
	defer stop()

	var wg sync.WaitGroup
	e.startClients(ctx, &wg, seed, rec, tal)
	wg.Go(func() { e.reloadLoop(ctx, rand.New(rand.NewPCG(seed, 1<<33)), tal) })
	wg.Go(func() { e.monitor(ctx, tal) })
	if !waitGroup(&wg, *duration+stopWait) {
		t.Fatalf("clients did not stop within %v after the run:\n%s", stopWait, strings.Join(leaked(before), "\n\n"))
	}

	t.Logf("attackers:\n%s", tal.summary())
	t.Logf("legitimate clients:\n%s", rec.summary())
	t.Logf("flaky upstream restarted %d times; reloads %v; %d deliberate panics behind httplimit",
		e.flaky.restarts, e.reloads, e.lib.panics.Load())

	e.checkIdle(t)
	e.stopAll(t)
	if left := waitLeaks(before, leakWait); len(left) > 0 {
		t.Errorf("%d goroutines left %v after everything stopped:\n\n%s", len(left), leakWait, strings.Join(left, "\n\n"))
	}

	for _, v := range tal.violations {
		t.Errorf("violation: %s", v)
	}
	checkLegit(t, rec, *duration)
	checkCoverage(t, e, tal)
}

// startClients starts, in wg, the legitimate clients, the attackers and
// the upstream killer, all running until ctx ends. Each attacker draws from
// its own random stream of seed, so that a seed replays the same choices.
func (e *env) startClients(ctx context.Context, wg *sync.WaitGroup, seed uint64, rec *record, tal *tally) {
	for i := range legitPerListener {
		c := clientFrom(fmt.Sprintf("127.0.0.%d", 200+i), nil)
		wg.Go(func() { legit(ctx, c, func() string { return "http://" + e.addr("web") + "/" }, rec) })
		c2 := clientFrom(fmt.Sprintf("127.0.0.%d", 220+i), e.tlsConfig("h2"))
		wg.Go(func() { legit(ctx, c2, func() string { return "https://" + e.addr("tls") + "/" }, rec) })
	}
	for i := range *attackers {
		// Attacker i owns 127.0.(i+1).1 to .4; legitimate clients are on
		// 127.0.0.x, the backends see the daemon from 127.0.0.1.
		var addrs []string
		for k := range 4 {
			addrs = append(addrs, fmt.Sprintf("127.0.%d.%d", i+1, k+1))
		}
		a := newAttacker(e, rand.New(rand.NewPCG(seed, uint64(i)+1)), addrs, tal)
		wg.Go(func() { a.run(ctx) })
	}
	wg.Go(func() { e.killUpstream(ctx, rand.New(rand.NewPCG(seed, 1<<32)), tal) })
}

// chooseSeed returns -chaos.seed, or a seed from the clock, and logs it
// with the command that replays it.
func chooseSeed(t *testing.T, name string, d time.Duration) uint64 {
	t.Helper()
	if *attackers < 1 || *attackers > 250 {
		t.Fatalf("-chaos.attackers must be in 1..250, got %d", *attackers)
	}
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("chaos: seed %d, %v, %d attackers; replay with: go test -race ./internal/chaos -run '^%s$' -chaos.seed=%d -chaos.duration=%v -chaos.attackers=%d",
		seed, d, *attackers, name, seed, *duration, *attackers)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chaos: failed with seed %d", seed)
		}
	})
	return seed
}

// waitGroup waits for wg at most d and reports whether it ended.
func waitGroup(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// checkIdle waits until every count is back to zero, read in process and
// through the admin listener's /debug/limits.
func (e *env) checkIdle(t *testing.T) {
	t.Helper()
	if !e.waitIdle(t) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	snap, err := e.adminSnapshot(ctx)
	switch {
	case err != nil:
		t.Errorf("admin listener: %v", err)
	case snap.InUse() != 0:
		t.Errorf("/debug/limits shows %d held after the daemon went idle", snap.InUse())
	}
}

// waitIdle waits up to drainWait until every count is back to zero, read
// in process; it reports whether they all are, and fails t if not.
func (e *env) waitIdle(t *testing.T) bool {
	t.Helper()
	deadline := time.Now().Add(drainWait)
	var held []string
	for {
		held = e.held()
		if len(held) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(held) > 0 {
		snap, _ := json.MarshalIndent(e.daemon.Snapshot(), "", "  ")
		t.Errorf("counts not back to zero %v after the clients stopped:\n  %s\ndaemon snapshot:\n%s",
			drainWait, strings.Join(held, "\n  "), snap)
		return false
	}
	return true
}

// stopAll shuts the daemon down gracefully (it is idle, so nothing may be
// cut off) and closes the backends, checking each step.
func (e *env) stopAll(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.daemon.Shutdown(ctx); err != nil {
		t.Errorf("daemon shutdown of an idle daemon: %v", err)
	}
	e.checkUpstreamClosed(t)
	e.stopBackends(t)
}

// checkUpstreamClosed checks that a stopped daemon closes its connections
// to the steady backend within 5 s: it keeps no idle upstream connection.
func (e *env) checkUpstreamClosed(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.steadyConns.Stats().Open != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := e.steadyConns.Stats(); st.Open != 0 {
		t.Errorf("steady backend: %d connections from the daemon still open after it stopped", st.Open)
	}
}

// stopBackends closes the backends, checking that their handlers returned.
func (e *env) stopBackends(t *testing.T) {
	t.Helper()
	if err := e.steady.Close(); err != nil {
		t.Errorf("steady backend close: %v", err)
	}
	e.flaky.kill()
	for _, err := range e.flaky.closeErrs {
		t.Errorf("flaky backend close: %v", err)
	}
	e.lib.close()
}

// killUpstream closes the flaky backend every 1.5 to 3.5 s and restarts it
// on the same port 0.2 to 1 s later, until ctx ends; it leaves it up.
func (e *env) killUpstream(ctx context.Context, rng *rand.Rand, tal *tally) {
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	for {
		pause(ctx, between(1500*time.Millisecond, 3500*time.Millisecond))
		if ctx.Err() != nil {
			return
		}
		e.flaky.kill()
		pause(ctx, between(200*time.Millisecond, time.Second))
		if err := e.flaky.revive(); err != nil {
			tal.violate("flaky upstream: %v", err)
			return
		}
	}
}

// reloadLoop reloads the daemon every 1.5 to 3 s, changing one knob at a
// time in turn (see knobs): a limiter is replaced while requests run and
// wait on the old one; a listener moves to a new socket while its old
// connections drain (web and tls to a new port; raw on its fixed port, the
// old socket closed first); a reload that adds a listener on an address in
// use fails and must leave every listener where it was. Everything else
// must carry over untouched.
func (e *env) reloadLoop(ctx context.Context, rng *rand.Rand, tal *tally) {
	for i := 0; ; i++ {
		pause(ctx, 1500*time.Millisecond+time.Duration(rng.Int64N(int64(1500*time.Millisecond))))
		if ctx.Err() != nil {
			return
		}
		var what string
		switch i % 6 {
		case 0:
			what = "queue route limiter replaced"
			e.knobs.queuePermits = 3 - e.knobs.queuePermits
		case 1:
			what = "web listener rebound"
			e.knobs.webIdle = 7*time.Second - e.knobs.webIdle
		case 2:
			e.failedReload(tal)
			continue
		case 3:
			what = "client limiter replaced"
			e.knobs.clientPermits = 28 - e.knobs.clientPermits
		case 4:
			what = "tls listener rebound"
			e.knobs.tlsIdle = 7*time.Second - e.knobs.tlsIdle
		default:
			what = "raw listener rebound in place"
			e.knobs.rawMaxConns = 1000 - e.knobs.rawMaxConns
		}
		if err := e.daemon.Reload(e.config()); err != nil {
			tal.violate("reload (%s): %v", what, err)
			return
		}
		e.reloads[what]++
	}
}

// failedReload reloads with a listener on the steady backend's address,
// which is in use, and checks that the reload failed and moved nothing.
func (e *env) failedReload(tal *tally) {
	names := []string{"web", "tls", "raw"}
	before := make([]string, len(names))
	for i, n := range names {
		before[i] = e.addr(n)
	}
	e.knobs.badListen = e.steady.Addr()
	err := e.daemon.Reload(e.config())
	e.knobs.badListen = ""
	if err == nil {
		tal.violate("reload with a listener on an address in use succeeded")
		return
	}
	for i, n := range names {
		if got := e.daemon.Addr(n); got == nil || got.String() != before[i] {
			tal.violate("failed reload (%v) moved listener %s from %s to %v", err, n, before[i], got)
		}
	}
	e.reloads["failed as it must"]++
}

// monitor checks, every 50 ms while the attack runs, that no client key
// holds more connections than its cap nor more permits than its limit, and
// every second that the admin listener answers.
func (e *env) monitor(ctx context.Context, tal *tally) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	admin := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		e.checkCaps(tal)
		if i%20 == 0 {
			for _, path := range []string{"/metrics", "/debug/limits", "/healthz", "/readyz"} {
				checkAdmin(ctx, admin, "http://"+e.daemon.AdminAddr().String()+path, tal)
			}
		}
	}
}

func (e *env) checkCaps(tal *tally) {
	for _, l := range e.daemon.Snapshot().Listeners {
		for _, k := range l.BusyClients {
			if k.InUse > connCap {
				tal.violate("listener %s: client %s holds %d connections, cap %d", l.Name, k.Key, k.InUse, connCap)
			}
		}
		if l.ClientLimit != nil {
			checkLimit(tal, l.Name+" client_limit", l.ClientLimit.Permits, l.ClientLimit.Busy)
		}
		for _, r := range l.Routes {
			if r.Limit != nil {
				checkLimit(tal, l.Name+" route "+r.Name, r.Limit.Permits, r.Limit.Busy)
			}
		}
	}
	for _, k := range e.lib.lim.Snapshot(0).Exchanges.Keys {
		if k.InUse > libPermits || k.Waiting > libQueue {
			tal.violate("library middleware: key %s has %d in use, %d waiting; limit %d, queue %d", k.Key, k.InUse, k.Waiting, libPermits, libQueue)
		}
	}
}

func checkLimit(tal *tally, what string, permits int, busy []admin.KeySnapshot) {
	for _, k := range busy {
		if permits > 0 && k.InUse > permits {
			tal.violate("%s: key %s has %d permits in use, limit %d", what, k.Key, k.InUse, permits)
		}
	}
}

// checkAdmin GETs an admin URL and records a violation unless it answers
// 200 (the attack never targets the admin listener).
func checkAdmin(ctx context.Context, c *http.Client, url string, tal *tally) {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := c.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			tal.violate("admin %s: %v", url, err)
		}
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tal.violate("admin %s: %s", url, resp.Status)
	}
}

// checkLegit asserts that legitimate clients were served in every whole
// second of a run that lasted d and that at least minSuccess of their
// requests succeeded.
func checkLegit(t *testing.T, rec *record, d time.Duration) {
	t.Helper()
	ok, failed := rec.totals()
	if ok+failed == 0 {
		t.Fatal("legitimate clients made no request")
	}
	rate := float64(ok) / float64(ok+failed)
	t.Logf("legitimate success: %d of %d (%.2f%%)", ok, ok+failed, 100*rate)
	if rate < minSuccess {
		t.Errorf("legitimate success %.2f%% under the %.0f%% floor", 100*rate, 100*minSuccess)
	}
	if empty := rec.emptySeconds(int(d / time.Second)); len(empty) > 0 {
		t.Errorf("no legitimate request succeeded in seconds %v of the run", empty)
	}
}

// checkCoverage fails a run that did not exercise what it claims to: every
// attacker action ran, the upstream was killed and came back, the library
// backend panicked, and the daemon was reloaded. Runs shorter than 5 s are
// too short to promise that.
func checkCoverage(t *testing.T, e *env, tal *tally) {
	t.Helper()
	if *duration < 5*time.Second {
		return
	}
	for _, ac := range actions {
		if tal.count(ac.name) == 0 {
			t.Errorf("no attacker ran %q", ac.name)
		}
	}
	if e.flaky.restarts == 0 {
		t.Error("the flaky upstream was never restarted")
	}
	if e.lib.panics.Load() == 0 {
		t.Error("the library backend's handler never panicked")
	}
	if len(e.reloads) == 0 {
		t.Error("the daemon was never reloaded")
	}
}
