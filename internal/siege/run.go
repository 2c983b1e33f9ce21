package siege

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/proccpu"
)

// fileMargin is open files a run needs beside its sockets (stdio, the
// runtime's poller, a server in the same process).
const fileMargin = 64

// Run performs one run as cfg describes and returns its report.
//
// Before any load it validates cfg (errors wrap [ErrInvalidConfig]), raises
// the open-file soft limit to the hard limit ([ErrTooFewFiles] if that is
// still too low), resolves the target and connects once from every source
// address ([ErrUnreachable] on failure); on such an error nothing was sent
// and the report is nil.
//
// Then the attacker, if the scenario has one, runs alone for Warmup, and the
// legitimate clients run beside it for Duration. Run returns when every
// goroutine it started has ended and every socket it opened is closed: about
// Warmup+Duration after it began, plus the time to close them. If ctx ends
// first, the run stops early and Run returns the report of what it measured
// together with ctx.Err().
func Run(ctx context.Context, cfg Config) (*Report, error) {
	s, err := cfg.resolve(ctx)
	if err != nil {
		return nil, err
	}
	if s.CPUPID > 0 {
		if _, err := proccpu.Of(strconv.Itoa(s.CPUPID)); err != nil {
			return nil, invalid("CPUPID: %v", err)
		}
	}
	limit, err := raiseFileLimit(s.filesNeeded())
	if err != nil {
		return nil, err
	}
	if err := s.preflight(ctx); err != nil {
		return nil, err
	}
	s.logger.Info("siege: starting", "scenario", s.Scenario, "target", s.Target,
		"duration", s.Duration, "warmup", s.Warmup, "loops", s.loops(), "attack_conns", s.slowloris+s.slowReqs)
	rep := s.run(ctx)
	rep.FileLimit = limit
	s.logger.Info("siege: done", "requests", rep.Legit.Requests, "goodput_per_s", rep.Legit.GoodputPerSec)
	return rep, ctx.Err()
}

func (s *settings) hasAttacker() bool { return s.slowloris+s.slowReqs > 0 }

func (s *settings) filesNeeded() uint64 {
	return uint64(s.loops()+s.slowloris+s.slowReqs) + fileMargin
}

// preflight connects once from each distinct source address, so an address
// this host does not own or a target that is down fails the run before it
// starts rather than showing up as a wall of errors.
func (s *settings) preflight(ctx context.Context) error {
	seen := make(map[netip.Addr]bool)
	sources := s.clientAddrs
	if s.hasAttacker() {
		sources = append([]netip.Addr{s.AttackerAddr}, sources...)
	}
	for _, src := range sources {
		if seen[src] {
			continue
		}
		seen[src] = true
		dctx, cancel := context.WithTimeout(ctx, s.Timeout)
		c, err := newDialer(src).DialContext(dctx, "tcp", s.target.String())
		cancel()
		if err != nil {
			return fmt.Errorf("%w: connecting from %v to %v: %w", ErrUnreachable, src, s.target, err)
		}
		_ = c.Close()
	}
	return nil
}

// run runs the attacker and the legitimate clients and gathers the report.
func (s *settings) run(ctx context.Context) *Report {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var attackers, reporter sync.WaitGroup
	var att *attacker
	loops := s.newLoops()
	attackStart := time.Now()
	if s.hasAttacker() {
		att = newAttacker(s)
		att.start(runCtx, &attackers)
	}
	progressCtx, stopProgress := context.WithDeadline(runCtx, attackStart.Add(s.Warmup+s.Duration))
	defer stopProgress()
	if s.Progress != nil {
		p := &progress{s: s, begin: attackStart, loops: loops, att: att, planned: s.Warmup + s.Duration}
		reporter.Go(func() { p.run(progressCtx) })
	}
	warmup := time.NewTimer(time.Until(attackStart.Add(s.Warmup)))
	select {
	case <-warmup.C:
	case <-runCtx.Done():
		warmup.Stop()
	}

	cpu := s.startCPU()
	start := time.Now()
	legitCtx, stopLegit := context.WithDeadline(runCtx, start.Add(s.Duration))
	defer stopLegit()
	var clients sync.WaitGroup
	for _, l := range loops {
		clients.Go(func() { l.run(legitCtx, start.Add(s.Duration)) })
	}
	<-legitCtx.Done()
	end := time.Now()
	if planned := start.Add(s.Duration); end.After(planned) {
		end = planned // what is counted ended before it
	}
	cpuStats := cpu.finish()
	cancel()
	clients.Wait()
	attackers.Wait()
	reporter.Wait() // no goroutine of Run's outlives it

	rep := &Report{
		Scenario: s.Scenario,
		Target:   s.Target,
		Duration: end.Sub(start),
		Legit:    s.legitStats(loops, end.Sub(start)),
		CPU:      cpuStats,
	}
	if att != nil {
		rep.Warmup = start.Sub(attackStart)
		rep.Attack = att.stats(end.Sub(attackStart))
	}
	if rep.CPU != nil && rep.Legit.Requests > 0 {
		rep.CPU.TargetPer1k = time.Duration(float64(rep.CPU.Target) * 1000 / float64(rep.Legit.Requests))
	}
	return rep
}

func (s *settings) newLoops() []*legitLoop {
	loops := make([]*legitLoop, 0, s.loops())
	for client := range s.Clients {
		tlsCfg := s.tlsConfigOrNil()
		for range s.ConnsPerClient {
			loops = append(loops, newLegitLoop(s, client, tlsCfg))
		}
	}
	return loops
}

func (s *settings) tlsConfigOrNil() *tls.Config {
	if !s.https {
		return nil
	}
	return s.tlsConfig()
}

func (s *settings) legitStats(loops []*legitLoop, window time.Duration) LegitStats {
	var all loopStats
	for _, l := range loops {
		all.merge(&l.stats)
	}
	ls := LegitStats{
		Clients:        s.Clients,
		ConnsPerClient: s.ConnsPerClient,
		KeepAlive:      s.keepAlive,
		Timeout:        s.Timeout,
		Requests:       all.requests,
		Successes:      all.successes,
		ConnsOpened:    all.connsOpened,
		Errors:         all.errors,
		P50:            all.latency.quantile(0.50),
		P99:            all.latency.quantile(0.99),
		P999:           all.latency.quantile(0.999),
		Max:            all.latency.max,
	}
	if secs := window.Seconds(); secs > 0 {
		ls.RequestsPerSec = float64(ls.Requests) / secs
		ls.GoodputPerSec = float64(ls.Successes) / secs
	}
	if ls.Requests > 0 {
		ls.SuccessRate = float64(ls.Successes) / float64(ls.Requests)
	}
	return ls
}

// cpuSample holds CPU times at the start of the measured window.
type cpuSample struct {
	pid          int
	target, self time.Duration
	ok           bool
}

func (s *settings) startCPU() cpuSample {
	if s.CPUPID <= 0 {
		return cpuSample{}
	}
	c := cpuSample{pid: s.CPUPID}
	var err1, err2 error
	c.target, err1 = proccpu.Of(strconv.Itoa(s.CPUPID))
	c.self, err2 = proccpu.Of("self")
	if err1 != nil || err2 != nil {
		s.logger.Warn("siege: cannot read CPU time; the report will have none", "err1", err1, "err2", err2)
		return cpuSample{}
	}
	c.ok = true
	return c
}

// finish returns the CPU used since startCPU, or nil if it cannot tell.
func (c cpuSample) finish() *CPUStats {
	if !c.ok {
		return nil
	}
	target, err1 := proccpu.Of(strconv.Itoa(c.pid))
	self, err2 := proccpu.Of("self")
	if err1 != nil || err2 != nil {
		return nil
	}
	return &CPUStats{PID: c.pid, Target: target - c.target, Self: self - c.self}
}
