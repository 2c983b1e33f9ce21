package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/backend"
)

// Legitimate clients: each makes one request at a time with this timeout
// and this pause between requests.
const (
	legitTimeout = 3 * time.Second
	legitPause   = 20 * time.Millisecond
)

// bucket is what legitimate clients got in one second of the run.
type bucket struct {
	ok, failed int
}

// record collects the legitimate clients' results in 1 s buckets by the
// time each request ended, the latencies of the successes, and an example
// of each kind of failure.
type record struct {
	start time.Time

	mu        sync.Mutex
	buckets   []bucket
	latencies []time.Duration // of successes
	failures  map[string]int
	examples  map[string]string
}

func newRecord(start time.Time) *record {
	return &record{start: start, failures: make(map[string]int), examples: make(map[string]string)}
}

// add records a request that ended at end after took; why is "" for a
// success.
func (r *record) add(end time.Time, took time.Duration, why string, detail string) {
	i := int(end.Sub(r.start) / time.Second)
	if i < 0 {
		i = 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.buckets) <= i {
		r.buckets = append(r.buckets, bucket{})
	}
	if why == "" {
		r.buckets[i].ok++
		r.latencies = append(r.latencies, took)
		return
	}
	r.buckets[i].failed++
	r.failures[why]++
	if _, ok := r.examples[why]; !ok {
		r.examples[why] = detail
	}
}

// totals returns the successes and failures of the whole run.
func (r *record) totals() (ok, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.buckets {
		ok += b.ok
		failed += b.failed
	}
	return ok, failed
}

// emptySeconds lists the whole seconds of the run, among the first n, in
// which no legitimate request succeeded.
func (r *record) emptySeconds(n int) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for i := range n {
		if i >= len(r.buckets) || r.buckets[i].ok == 0 {
			out = append(out, i)
		}
	}
	return out
}

// summary is one "ok/total" per second, the latency of successes, then
// the failures by kind.
func (r *record) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	if n := len(r.latencies); n > 0 {
		lat := slices.Clone(r.latencies)
		slices.Sort(lat)
		fmt.Fprintf(&b, "  latency of successes: p50 %v, p99 %v, max %v\n",
			lat[n/2].Round(time.Millisecond), lat[n*99/100].Round(time.Millisecond), lat[n-1].Round(time.Millisecond))
	}
	b.WriteString("  per second (ok/total, by end time):")
	for i, x := range r.buckets {
		if i%10 == 0 {
			b.WriteString("\n   ")
		}
		fmt.Fprintf(&b, " %3d/%-3d", x.ok, x.ok+x.failed)
	}
	kinds := make([]string, 0, len(r.failures))
	for k := range r.failures {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(&b, "\n  failure %-24s %5d  e.g. %s", k, r.failures[k], r.examples[k])
	}
	return b.String()
}

// legit makes requests to the steady route through the URL url returns
// (on the http or the https listener, which a reload may move) until ctx ends, and records each result. A success is a
// 200 with the backend's exact body. A request cut by the end of the run
// is not recorded.
func legit(ctx context.Context, c *http.Client, url func() string, rec *record) {
	defer c.CloseIdleConnections()
	for ctx.Err() == nil {
		start := time.Now()
		why, detail := legitOnce(ctx, c, url())
		if why != "" && ctx.Err() != nil {
			return
		}
		rec.add(time.Now(), time.Since(start), why, detail)
		pause(ctx, legitPause)
	}
}

// legitOnce makes one request and returns why it failed ("" on success)
// and a detail for the report.
func legitOnce(ctx context.Context, c *http.Client, url string) (why, detail string) {
	rctx, cancel := context.WithTimeout(ctx, legitTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, "GET", url, nil)
	if err != nil {
		return "request", err.Error()
	}
	req.Host = hostSteady
	resp, err := c.Do(req)
	if err != nil {
		return outcome(err), err.Error()
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return "body " + outcome(err), err.Error()
	case resp.StatusCode != http.StatusOK:
		return fmt.Sprintf("status %d", resp.StatusCode), strings.TrimSpace(string(body))
	case string(body) != backend.HelloBody:
		return "wrong body", fmt.Sprintf("%q", body)
	}
	return "", ""
}
