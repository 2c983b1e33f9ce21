package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Layout of one key's hash (see docs/cluster.md):
//
//	c:<node>   permits the node holds
//	e:<node>   when the node's lease ends, Unix ms of Redis's TIME
//	ae:<node>  newest snapshot epoch seen from the node (see below)
//	ac:<node>  permits granted to acquires of epoch ae, or -1 once the
//	           absolute write of snapshot ae was applied
//	w          until when (Unix ms) some node was refused: releases publish
//
// A node's fields count only while its lease has not ended; the scripts
// delete other nodes' expired fields as they meet them. The hash itself
// expires 2 leases after the last write, so an idle key disappears.
//
// Epochs keep the heartbeat's absolute write from erasing a concurrent
// acquire. The node numbers its heartbeat snapshots (increasing, also
// across restarts: they start from the Unix time in ms) and tags each
// acquire with the epoch of the last snapshot that did not count it. A
// snapshot counts the node's acquires in flight (their tags are older).
// An acquire granted before the write of a snapshot:
//
//   - tagged with that snapshot's epoch (it began after the snapshot):
//     lands in ac, and the write adds ac to its count;
//   - tagged older (in flight at the snapshot, which counted it): is
//     overwritten by the write, which counted it.
//
// An acquire granted after the write just adds to c: right for one tagged
// with the write's epoch, one too many for one tagged older, which the
// script reports (stale, with ae) so that the node takes it off again
// with a delta. A refused acquire that a snapshot counted is taken off
// the same way once the node learns the write was applied. A write older
// than ae (one that timed out and arrived late) is ignored.

// liveLua starts both scripts (KEYS[1] the key's hash, ARGV[1] the node):
// one TIME and one HGETALL, from which it sums the permits of the other
// nodes with a live lease (others), deleting expired ones, and reads this
// node's count (before), ae, and w; a node's own fields count whatever
// their expiry, since it is renewing them. The scripts are written inline,
// without Lua functions, and read every field from the one HGETALL: each
// command and closure a script runs costs Redis CPU on every call.
const liveLua = `
local key, node = KEYS[1], ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local f = redis.call('HGETALL', key)
local h = {}
for i = 1, #f, 2 do h[f[i]] = f[i + 1] end
local cn = 'c:' .. node
local others, before = 0, tonumber(h[cn]) or 0
for i = 1, #f, 2 do
  local name = f[i]
  if name ~= cn and string.sub(name, 1, 2) == 'c:' then
    local id = string.sub(name, 3)
    if (tonumber(h['e:' .. id]) or 0) > now then
      others = others + (tonumber(f[i + 1]) or 0)
    else
      redis.call('HDEL', key, name, 'e:' .. id, 'ae:' .. id, 'ac:' .. id)
    end
  end
end
local en, aen, acn = 'e:' .. node, 'ae:' .. node, 'ac:' .. node
local ae, w = tonumber(h[aen]) or 0, tonumber(h['w']) or 0
`

// acquireScript: KEYS[1] the key's hash; ARGV node, limit, lease ms, TTL
// ms, epoch, delta, channel, message, extra (absent: 0). It first applies
// delta, this node's releases not yet sent, unless an absolute write of a
// snapshot newer than epoch already counted them (ae > epoch), floored at
// 0; then takes one permit for node if the live total is under limit, and
// with it up to extra more as long as the total stays within limit (for
// acquires waiting on this one), or marks the key refused (w) for a
// lease; and publishes message on channel when the
// node's count fell while some node was recently refused, so that other
// nodes' waiters retry. It writes the node's fields in one HSET (or
// deletes them at 0) and renews the hash's TTL. It returns {granted (0 or
// 1), others, mine after, stale, ae, extra permits taken}: stale is 1 when
// the permit was granted after the absolute write of snapshot ae, newer
// than the acquire's epoch, had counted it (see above).
var acquireScript = redis.NewScript(liveLua + `
local lease, epoch, d = tonumber(ARGV[3]), tonumber(ARGV[5]), tonumber(ARGV[6])
local mine = before
if d ~= 0 and epoch >= ae then
  mine = before + d
  if mine < 0 then mine = 0 end
end
local granted, stale, got = 0, 0, 0
local limit = tonumber(ARGV[2])
if others + mine < limit then
  got = math.max(math.min(tonumber(ARGV[9]) or 0, limit - others - mine - 1), 0)
  mine = mine + 1 + got
  granted = 1
  local ac = tonumber(h[acn]) or 0
  if epoch > ae then
    redis.call('HSET', key, cn, mine, en, now + lease, aen, epoch, acn, 1 + got)
  elseif epoch == ae and ac >= 0 then
    redis.call('HSET', key, cn, mine, en, now + lease, acn, ac + 1 + got)
  else
    if epoch < ae and ac < 0 then stale = 1 end
    redis.call('HSET', key, cn, mine, en, now + lease)
  end
else
  w = now + lease
  if mine == 0 then
    redis.call('HSET', key, 'w', w)
    redis.call('HDEL', key, cn, en, aen, acn)
  elseif mine ~= before then
    redis.call('HSET', key, 'w', w, cn, mine, en, now + lease)
  else
    redis.call('HSET', key, 'w', w)
  end
end
if mine < before and w > now then
  redis.call('PUBLISH', ARGV[7], ARGV[8])
end
redis.call('PEXPIRE', key, ARGV[4])
return {granted, others, mine, stale, ae, got}
`)

// syncScript: KEYS[1] the key's hash; ARGV node, mode, n, lease ms, TTL ms,
// channel, message, epoch. Mode "d" adds n as the acquire script adds its
// delta; mode "a" sets the count to n as of snapshot epoch (plus the
// acquires of that epoch Redis granted first; ignored if older than ae)
// and marks the snapshot as applied (ac -1). It renews the node's lease,
// or deletes its fields at 0, and publishes as the acquire script does.
// It returns {others, mine after}.
var syncScript = redis.NewScript(liveLua + `
local mode, n, lease, epoch = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[8])
local new = before
if mode == 'd' then
  if n ~= 0 and epoch >= ae then
    new = before + n
    if new < 0 then new = 0 end
    if new > 0 then
      redis.call('HSET', key, cn, new, en, now + lease)
    end
  end
  if new == 0 then
    redis.call('HDEL', key, cn, en, aen, acn)
  end
elseif epoch >= ae then
  if epoch == ae then
    n = n + math.max(tonumber(h[acn]) or 0, 0)
  end
  if n < 0 then n = 0 end
  new = n
  if new > 0 then
    redis.call('HSET', key, cn, new, en, now + lease, aen, epoch, acn, -1)
  else
    redis.call('HDEL', key, cn, en, aen, acn)
  end
end
if new < before and w > now then
  redis.call('PUBLISH', ARGV[6], ARGV[7])
end
if new > 0 then redis.call('PEXPIRE', key, ARGV[5]) end
return {others, new}
`)

// acquireReply is the decoded answer of acquireScript.
type acquireReply struct {
	granted      bool
	others, mine int
	stale        bool  // granted after a write of snapshot ae had counted it
	ae           int64 // the newest snapshot epoch Redis had seen from the node
	got          int   // permits taken besides the acquire's own
}

// syncReply is the decoded answer of syncScript.
type syncReply struct{ others, mine int }

var errBadReply = errors.New("redisstore: unexpected script reply")

// ints decodes a script's array of integers of length n.
func ints(v any, n int) ([]int64, error) {
	a, ok := v.([]any)
	if !ok || len(a) != n {
		return nil, fmt.Errorf("%w: %v", errBadReply, v)
	}
	out := make([]int64, n)
	for i, x := range a {
		if out[i], ok = x.(int64); !ok {
			return nil, fmt.Errorf("%w: %v", errBadReply, v)
		}
	}
	return out, nil
}

func decodeAcquire(v any) (acquireReply, error) {
	x, err := ints(v, 6)
	if err != nil {
		return acquireReply{}, err
	}
	return acquireReply{granted: x[0] == 1, others: int(x[1]), mine: int(x[2]), stale: x[3] == 1, ae: x[4], got: int(x[5])}, nil
}

func decodeSync(v any) (syncReply, error) {
	x, err := ints(v, 2)
	if err != nil {
		return syncReply{}, err
	}
	return syncReply{others: int(x[0]), mine: int(x[1])}, nil
}

// isNoScript reports whether err is Redis's NOSCRIPT: the script cache was
// flushed (restart, failover, SCRIPT FLUSH) and the script did not run.
func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// syncCall is one syncScript invocation in a pipeline.
type syncCall struct {
	name    string // the hash
	mode    string // "d" or "a"
	n       int
	epoch   int64  // the snapshot an absolute write is of, or a delta is after
	message string // published on release
	reply   syncReply
	err     error
}

// runSync runs calls in one pipeline (one round trip). After NOSCRIPT it
// loads the script and runs the calls that hit it once more: NOSCRIPT means
// they did not run, so running them again counts nothing twice. Each
// call's err is set; the returned error is the first failure.
func (s *Store[K]) runSync(ctx context.Context, calls []syncCall) error {
	idx := make([]int, len(calls))
	for i := range idx {
		idx[i] = i
	}
	err := s.pipeSync(ctx, calls, idx)
	var again []int
	for _, i := range idx {
		if isNoScript(calls[i].err) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return err
	}
	if lerr := syncScript.Load(ctx, s.s.Client).Err(); lerr != nil {
		return fmt.Errorf("redisstore: load sync script: %w", lerr)
	}
	_ = s.pipeSync(ctx, calls, again)
	for i := range calls {
		if calls[i].err != nil {
			return fmt.Errorf("redisstore: sync pipeline: %w", calls[i].err)
		}
	}
	return nil
}

func (s *Store[K]) pipeSync(ctx context.Context, calls []syncCall, idx []int) error {
	lease := s.s.Lease.Milliseconds()
	pipe := s.s.Client.Pipeline()
	cmds := make([]*redis.Cmd, len(idx))
	for j, i := range idx {
		c := &calls[i]
		cmds[j] = syncScript.EvalSha(ctx, pipe, []string{c.name},
			s.s.NodeID, c.mode, c.n, lease, 2*lease, s.s.channel, c.message, c.epoch)
	}
	_, err := pipe.Exec(ctx)
	var first error
	for j, i := range idx {
		c := &calls[i]
		v, cerr := cmds[j].Result()
		if cerr == nil {
			c.reply, cerr = decodeSync(v)
		}
		c.err = cerr
		if cerr != nil && first == nil {
			first = cerr
		}
	}
	if first == nil {
		first = err
	}
	if first != nil {
		return fmt.Errorf("redisstore: sync pipeline: %w", first)
	}
	return nil
}

// runAcquire runs acquireScript: EVALSHA, and EVAL after NOSCRIPT.
func (s *Store[K]) runAcquire(ctx context.Context, name string, limit int, epoch int64, delta, extra int, message string) (acquireReply, error) {
	lease := s.s.Lease.Milliseconds()
	v, err := acquireScript.Run(ctx, s.s.Client, []string{name},
		s.s.NodeID, limit, lease, 2*lease, epoch, delta, s.s.channel, message, extra).Result()
	if err != nil {
		return acquireReply{}, fmt.Errorf("redisstore: acquire script: %w", err)
	}
	return decodeAcquire(v)
}
