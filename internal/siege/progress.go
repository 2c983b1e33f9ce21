package siege

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// liveCounts are a request loop's counts readable while the loop runs. The
// loop alone writes them, next to its own loopStats, so the progress line
// reads them without a lock and the hot path pays two uncontended adds.
type liveCounts struct {
	requests, successes atomic.Uint64
}

// progress writes a line to s.Progress every s.ProgressInterval until ctx
// ends: how far the run is, and what the legitimate clients and the
// attacker have got so far.
type progress struct {
	s       *settings
	begin   time.Time // when the attacker (or, without one, the clients) started
	loops   []*legitLoop
	att     *attacker // nil without an attacker
	planned time.Duration
}

func (p *progress) run(ctx context.Context) {
	t := time.NewTicker(p.s.ProgressInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			_, _ = io.WriteString(p.s.Progress, p.line(now.Sub(p.begin)))
		}
	}
}

// line is one progress line for the moment elapsed after the beginning.
func (p *progress) line(elapsed time.Duration) string {
	phase := "measuring"
	if elapsed < p.s.Warmup {
		phase = "warm-up, attacker alone"
	}
	out := fmt.Sprintf("siege: %v/%v %s", elapsed.Round(time.Second), p.planned.Round(time.Second), phase)
	if elapsed >= p.s.Warmup {
		var requests, successes uint64
		for _, l := range p.loops {
			requests += l.live.requests.Load()
			successes += l.live.successes.Load()
		}
		rate := "-"
		if requests > 0 {
			rate = fmt.Sprintf("%.1f%%", 100*float64(successes)/float64(requests))
		}
		out += fmt.Sprintf(": %d requests, %d succeeded (%s)", requests, successes, rate)
	}
	if p.att != nil {
		sep := ";"
		if elapsed < p.s.Warmup {
			sep = ":"
		}
		out += fmt.Sprintf("%s attacker holds %d connections, %d refused", sep, p.att.held.Load(), p.att.refused.Load())
	}
	return out + "\n"
}
