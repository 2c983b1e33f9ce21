package httplimit_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/limit/limittest"
	"github.com/seed-a07d1050/portcullis/rate"
)

// A parityCase is one nginx limit_req setting and a script of arrivals,
// offsets from the script's start.
type parityCase struct {
	name     string
	lim      rate.Limit
	arrivals []time.Duration
}

// The cases run at 5r/s (a 200 ms interval) with arrivals placed so that
// every decision is at least parityMargin away from flipping (checked
// below against the exact model), which absorbs millisecond rounding and
// scheduling jitter on a loaded machine.
const (
	parityMargin    = 40 * time.Millisecond
	parityTolerance = 50 * time.Millisecond // on each delay seen
)

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

// burst returns n arrivals from at, 15 ms apart: spread enough that the
// last one admitted is never within parityMargin of the limit.
func burst(at, n int) []int { return spread(at, n, 15) }

// spread returns n arrivals from at, gap ms apart.
func spread(at, n, gap int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = at + gap*i
	}
	return out
}

func seq(parts ...[]int) []time.Duration {
	var all []int
	for _, p := range parts {
		all = append(all, p...)
	}
	return ms(all...)
}

var parityCases = []parityCase{
	{"burst=3 nodelay", rate.Limit{Rate: rate.PerSecond(5), Burst: 3, Delay: rate.NoDelay},
		seq(burst(0, 6), []int{300, 500}, burst(1100, 3), []int{1700, 1900}, burst(2600, 2))},
	{"burst=4", rate.Limit{Rate: rate.PerSecond(5), Burst: 4},
		seq(burst(0, 7), burst(1900, 3), []int{2560, 2700})},
	{"burst=6 delay=2", rate.Limit{Rate: rate.PerSecond(5), Burst: 6, Delay: 2},
		seq(spread(0, 10, 40), []int{900}, spread(2100, 4, 40))},
	{"no burst", rate.Limit{Rate: rate.PerSecond(5)},
		ms(0, 100, 300, 350, 600, 900, 1000, 1300, 1560)},
}

// parityResult is what one request saw, or should see.
type parityResult struct {
	status int
	delay  time.Duration // from sending the request to its response

	// For the model: the request whose arrival fixed this one's delay
	// (the last to find its key fresh), and how long after that arrival
	// this one proceeds. Measured: when the response came.
	anchor      int
	sinceAnchor time.Duration
	done        time.Time
	late        time.Duration // how late the request was sent
}

// expected runs a case through the limiter on a fake clock: the exact
// model. It fails the test if an arrival lies within parityMargin of a
// decision boundary, so that the script, not the machine, is to blame.
func expected(t *testing.T, c parityCase) []parityResult {
	t.Helper()
	clock := limittest.NewClock()
	l, err := rate.New(rate.Config[string]{Rate: c.lim.Rate, Burst: c.lim.Burst, Delay: c.lim.Delay, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	iv := c.lim.Rate.Interval()
	var out []parityResult
	var now time.Duration
	tat := time.Duration(-1 << 62) // the key's TAT: none yet
	anchor := 0
	for i, at := range c.arrivals {
		clock.Advance(at - now)
		now = at
		// A decision flips where TAT - now crosses Burst·T (refused or
		// not) or Delay·T (delayed or not).
		x := tat - at
		margin := (x - time.Duration(c.lim.Burst)*iv).Abs()
		if c.lim.Delay != rate.NoDelay && c.lim.Delay < c.lim.Burst {
			margin = min(margin, (x - time.Duration(c.lim.Delay)*iv).Abs())
		}
		if margin < parityMargin {
			t.Fatalf("%s: arrival %d at %v is %v from a decision boundary; move it", c.name, i, at, margin)
		}
		d := l.Allow("k")
		if x <= 0 {
			anchor = i
		}
		tat = at + d.Reset
		r := parityResult{status: http.StatusOK, anchor: anchor, sinceAnchor: at + d.Delay - c.arrivals[anchor]}
		switch d.Verdict {
		case rate.Refused:
			r.status = http.StatusTooManyRequests
		case rate.Delayed:
			r.delay = d.Delay
		}
		out = append(out, r)
	}
	return out
}

// play sends each arrival of a case at its time, each on its own
// connection dialled ahead of time (so that dialling adds no jitter), and
// records what it saw.
func play(t *testing.T, addr, path string, c parityCase) []parityResult {
	t.Helper()
	out := make([]parityResult, len(c.arrivals))
	start := time.Now().Add(100 * time.Millisecond)
	var wg sync.WaitGroup
	for i, at := range c.arrivals {
		wg.Go(func() {
			out[i] = parityResult{status: -1}
			time.Sleep(time.Until(start.Add(at - 50*time.Millisecond)))
			conn, err := dialerFrom("127.0.0.1").Dial("tcp", addr)
			if err != nil {
				return
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(waitLimit))
			time.Sleep(time.Until(start.Add(at)))
			sent := time.Now()
			late := sent.Sub(start.Add(at))
			if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: parity\r\nConnection: close\r\n\r\n"); err != nil {
				return
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				return
			}
			done := time.Now()
			resp.Body.Close()
			out[i] = parityResult{status: resp.StatusCode, delay: done.Sub(sent), done: done, late: late}
		})
	}
	wg.Wait()
	return out
}

// compare checks what a server did against the model, request by request:
// the status; for a request that should not wait, that it did not; for a
// delayed one, that its response came when the model says after the
// response to the request that fixed its delay (so that a late arrival of
// that one, which shifts every later delay alike, is not held against the
// server).
func compare(t *testing.T, who string, c parityCase, want, got []parityResult) {
	t.Helper()
	for i := range want {
		w, g := want[i], got[i]
		ok := g.status == w.status
		switch {
		case !ok:
		case w.delay == 0:
			ok = g.delay <= parityTolerance
		default:
			since := g.done.Sub(got[w.anchor].done)
			ok = (since - w.sinceAnchor).Abs() <= parityTolerance
			g.delay = since // for the message
			w.delay = w.sinceAnchor
		}
		if !ok {
			t.Errorf("%s %s: request %d at %v: status %d after %v, want %d after %v (delays of delayed requests are from request %d's response)",
				who, c.name, i, c.arrivals[i], g.status, g.delay.Round(time.Millisecond), w.status, w.delay, w.anchor)
		}
	}
}

// TestNginxParity runs the same scripted arrivals against a real nginx
// limit_req and against RateLimiter, each on loopback with the real clock,
// and checks that both admit, delay and refuse exactly the requests the
// exact model does: the same status code for every request (200 or 429),
// and the same delay before each response, within parityTolerance.
func TestNginxParity(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about 8 s of real time")
	}
	for _, c := range parityCases {
		expected(t, c) // the scripts are sound before anything runs
	}
	t.Run("nginx", func(t *testing.T) {
		addr := startNginx(t, parityCases)
		// A rerun waits for every zone to drain back to fresh (the longest
		// script leaves its key at most 2 s ahead).
		runParity(t, "nginx", addr, func() { time.Sleep(3 * time.Second) })
	})
	t.Run("portcullis", func(t *testing.T) {
		var mu sync.Mutex
		handlers := make([]http.Handler, len(parityCases))
		build := func() {
			mu.Lock()
			defer mu.Unlock()
			for i, c := range parityCases {
				l, err := httplimit.NewRate(httplimit.RateConfig{Rate: c.lim.Rate, Burst: c.lim.Burst, Delay: c.lim.Delay, Logger: quietLogger()})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close() })
				handlers[i] = l.Wrap(okHandler())
			}
		}
		build()
		ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			i, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/s"))
			if err != nil || i < 0 || i >= len(handlers) {
				http.NotFound(w, r)
				return
			}
			mu.Lock()
			h := handlers[i]
			mu.Unlock()
			h.ServeHTTP(w, r)
		}))
		runParity(t, "portcullis", ts.Listener.Addr().String(), build)
	})
}

// runParity plays every case at once against addr and compares. A run in
// which the machine stalled (a request sent more than 15 ms late, or a
// response more than 300 ms later than the model allows, as happens when
// other jobs swamp the cores) says nothing about the server and is run
// again, on fresh keys, up to three times; the last run is compared
// whatever happened. A wrong decision is not a stall: it repeats.
func runParity(t *testing.T, who, addr string, fresh func()) {
	var results [][]parityResult
	for attempt := 1; ; attempt++ {
		var wg sync.WaitGroup
		results = make([][]parityResult, len(parityCases))
		for i, c := range parityCases {
			wg.Go(func() { results[i] = play(t, addr, "/s"+strconv.Itoa(i), c) })
		}
		wg.Wait()
		stall := stalled(t, results)
		if stall == "" || attempt == 3 {
			break
		}
		t.Logf("%s attempt %d: %s; running again", who, attempt, stall)
		fresh()
	}
	for i, c := range parityCases {
		want := expected(t, c)
		compare(t, who, c, want, results[i])
		logTable(t, who, c, want, results[i])
	}
}

// logTable writes, with -v, one line per request: its arrival, what the
// model says and what the server did (status, and the delay measured from
// the request that fixed it, or from sending it when not delayed).
func logTable(t *testing.T, who string, c parityCase, want, got []parityResult) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %s (%v); +t is when a delayed request proceeded, after the request that found the key fresh:\n  arrival  model         %s\n", who, c.name, c.lim, who)
	for i := range want {
		w, g := want[i], got[i]
		wd, gd := w.delay, g.delay
		if w.delay > 0 {
			wd, gd = w.sinceAnchor, g.done.Sub(got[w.anchor].done)
		}
		fmt.Fprintf(&b, "  %6v   %d +%-8v  %d +%v\n", c.arrivals[i], w.status, wd, g.status, gd.Round(time.Millisecond))
	}
	t.Log(b.String())
}

// stalled describes the first sign that the machine, not the server, held
// a run back, or returns "".
func stalled(t *testing.T, results [][]parityResult) string {
	for i, c := range parityCases {
		want := expected(t, c)
		for j, g := range results[i] {
			switch {
			case g.late > 15*time.Millisecond:
				return fmt.Sprintf("%s request %d sent %v late", c.name, j, g.late.Round(time.Millisecond))
			case g.status > 0 && g.delay > want[j].delay+300*time.Millisecond:
				return fmt.Sprintf("%s request %d answered after %v, model %v", c.name, j, g.delay.Round(time.Millisecond), want[j].delay)
			}
		}
	}
	return ""
}

// startNginx starts nginx in the foreground on a free loopback port with
// one location per case, each with its own zone, and returns its base
// URL. It skips the test without nginx on PATH, or fails it when CI=true.
// nginx is stopped by its PID when the test ends.
func startNginx(t *testing.T, cases []parityCase) string {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		// Debian installs it in /usr/sbin, which a non-root PATH may lack.
		for _, p := range []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no nginx on PATH (CI=true, so this fails instead of skipping); install it with `apt-get install -y nginx`")
		}
		t.Skip("no nginx on PATH; install it with `apt-get install -y nginx` to compare with nginx's limit_req")
	}
	dir := t.TempDir()
	www := filepath.Join(dir, "www")
	if err := os.MkdirAll(www, 0o755); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	var zones, locations strings.Builder
	for i, c := range cases {
		fmt.Fprintf(&zones, "  limit_req_zone $binary_remote_addr zone=z%d:1m rate=%s;\n", i, c.lim.Rate)
		args := fmt.Sprintf("zone=z%d", i)
		if c.lim.Burst > 0 {
			args += fmt.Sprintf(" burst=%d", c.lim.Burst)
		}
		switch {
		case c.lim.Delay == rate.NoDelay:
			args += " nodelay"
		case c.lim.Delay > 0:
			args += fmt.Sprintf(" delay=%d", c.lim.Delay)
		}
		fmt.Fprintf(&locations, "    location = /s%d { limit_req %s; }\n", i, args)
		if err := os.WriteFile(filepath.Join(www, "s"+strconv.Itoa(i)), []byte("ok"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  limit_req_status 429;
%[2]s  server {
    listen 127.0.0.1:%[3]d;
    root %[4]s;
%[5]s  }
}
`, dir, zones.String(), port, www, locations.String())
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", confPath, "-e", filepath.Join(dir, "error.log"))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited at start: %s\n%s", out.String(), log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx does not accept on %s: %v", addr, errors.Join(err))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return addr
}

// freePort asks the kernel for a free loopback port. Another process
// could take it before nginx binds it; startNginx then fails clearly.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
