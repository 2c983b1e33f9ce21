package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// A JointPart is one Store's Acquire inside [AcquireJointly]: a key, its
// limit and this node's count, as [Store.Acquire] takes them. Make one
// with [Store.Part]; after AcquireJointly, Result tells its answer.
type JointPart interface {
	// Result is the part's answer, as Acquire would have returned it.
	Result() (bool, error)

	begin() (decided bool)
	client() redis.UniversalClient
	timeout() time.Duration
	queue(ctx context.Context, pipe redis.Pipeliner)
	cmd() *redis.Cmd
	end(ctx context.Context, err error)
	record(d time.Duration, err error)
	undo()
}

// Part returns key's Acquire under limit, with local permits held here, as
// one part of [AcquireJointly].
func (s *Store[K]) Part(key K, limit, local int) JointPart {
	return &jointPart[K]{s: s, key: key, limit: limit, local: local}
}

type jointPart[K comparable] struct {
	s            *Store[K]
	key          K
	limit, local int
	call         acquireCall[K]
	c            *redis.Cmd
	ok           bool
	err          error
}

func (p *jointPart[K]) Result() (bool, error) { return p.ok, p.err }

func (p *jointPart[K]) begin() bool {
	var decided bool
	p.call, _, decided, p.ok, p.err = p.s.beginAcquire(p.key, p.limit, p.local, nil, false)
	return decided
}

func (p *jointPart[K]) client() redis.UniversalClient { return p.s.s.Client }

func (p *jointPart[K]) timeout() time.Duration { return p.s.s.Timeout }

func (p *jointPart[K]) queue(ctx context.Context, pipe redis.Pipeliner) {
	lease := p.s.s.Lease.Milliseconds()
	p.c = acquireScript.EvalSha(ctx, pipe, []string{p.call.e.name},
		p.s.s.NodeID, p.limit, lease, 2*lease, p.call.epoch, p.call.delta, p.s.s.channel, p.call.e.ks, p.call.extra)
}

func (p *jointPart[K]) cmd() *redis.Cmd { return p.c }

func (p *jointPart[K]) end(ctx context.Context, err error) {
	var reply acquireReply
	if err == nil {
		var v any
		if v, err = p.c.Result(); err == nil {
			reply, err = decodeAcquire(v)
		}
	}
	if err != nil {
		err = fmt.Errorf("redisstore: joint acquire: %w", err)
	}
	p.ok, p.err = p.s.endAcquire(ctx, p.call, reply, err)
}

func (p *jointPart[K]) undo() { p.s.Release(p.key) }

// AcquireJointly acquires every part or none, in at most one round trip:
// the parts that need Redis (those [Store.Acquire] would not decide
// without it) run their acquire scripts in one pipeline, so a new
// connection's connection cap and its route limit, say, cost one round
// trip instead of two in a row. It reports whether all were granted; if
// some part was refused or failed, the parts that were granted are
// released at once (a queued release: no round trip of its own, and
// exact, as any Release), and Result tells each part's own answer, the
// error of the first that failed being returned too.
//
// The parts' Stores must share one Redis client for the pipeline (with a
// Redis Cluster, go-redis sends the part of a pipeline each node holds in
// parallel); parts of Stores on other clients run in their own pipeline,
// one per client, one after the other. The pipeline is bounded by the
// first part's Store's Timeout and by ctx; each Store counts it as one of
// its acquire calls, and each follows its own failure policy (Open
// decides a failed part by its node cap, Closed refuses it).
func AcquireJointly(ctx context.Context, parts ...JointPart) (bool, error) {
	var need []JointPart
	for _, p := range parts {
		if !p.begin() {
			need = append(need, p)
		}
	}
	for len(need) > 0 {
		c := need[0].client()
		var same, rest []JointPart
		for _, p := range need {
			if p.client() == c {
				same = append(same, p)
			} else {
				rest = append(rest, p)
			}
		}
		runJoint(ctx, c, same)
		need = rest
	}
	all := true
	var first error
	for _, p := range parts {
		ok, err := p.Result()
		all = all && ok && err == nil
		if err != nil && first == nil {
			first = err
		}
	}
	if !all {
		for _, p := range parts {
			if ok, err := p.Result(); ok && err == nil {
				p.undo()
			}
		}
	}
	return all, first
}

// runJoint runs the scripts of parts, which share client c, in one
// pipeline, and ends each part with its reply. After NOSCRIPT (a restart,
// a failover, SCRIPT FLUSH) it loads the script and sends the calls that
// hit it once more: NOSCRIPT means they did not run, so nothing counts
// twice.
func runJoint(ctx context.Context, c redis.UniversalClient, parts []JointPart) {
	// The parts end under ctx, not under the call's timeout: a timed out
	// call is Redis failing (the failure policy), not the caller giving up.
	cctx, cancel := context.WithTimeout(ctx, parts[0].timeout())
	defer cancel()
	start := time.Now()
	send := func(ps []JointPart) error {
		pipe := c.Pipeline()
		for _, p := range ps {
			p.queue(cctx, pipe)
		}
		_, err := pipe.Exec(cctx)
		return err
	}
	err := send(parts)
	var again []JointPart
	for _, p := range parts {
		if isNoScript(p.cmd().Err()) {
			again = append(again, p)
		}
	}
	if len(again) > 0 {
		if lerr := acquireScript.Load(cctx, c).Err(); lerr == nil {
			err = send(again)
		}
	}
	d := time.Since(start)
	for _, p := range parts {
		perr := p.cmd().Err()
		if perr == nil && err != nil && p.cmd().Val() == nil {
			perr = err // the pipeline failed before this call was answered
		}
		p.record(d, perr)
		p.end(ctx, perr)
	}
}

// record counts the pipeline as one acquire call of the part's Store.
func (p *jointPart[K]) record(d time.Duration, err error) { p.s.st.call(opAcquire, d, err) }
