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

// liveLua sums the permits of the nodes with a live lease, deleting expired
// ones. It returns the permits of the other nodes and those of ARGV[1], and
// the hash as a table; a node's own fields count whatever their expiry,
// since it is renewing them. One HGETALL: the scripts read every other
// field they need from the table.
const liveLua = `
local function live(key, node, now)
  local f = redis.call('HGETALL', key)
  local h = {}
  for i = 1, #f, 2 do h[f[i]] = f[i + 1] end
  local others, mine = 0, 0
  for i = 1, #f, 2 do
    local name = f[i]
    if string.sub(name, 1, 2) == 'c:' then
      local id = string.sub(name, 3)
      local n = tonumber(f[i + 1]) or 0
      if id == node then
        mine = n
      elseif (tonumber(h['e:' .. id]) or 0) > now then
        others = others + n
      else
        redis.call('HDEL', key, name, 'e:' .. id, 'ae:' .. id, 'ac:' .. id)
      end
    end
  end
  return others, mine, h
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// acquireScript: KEYS[1] the key's hash; ARGV node, limit, lease ms, TTL
// ms, epoch, delta, channel, message. It first applies delta, this node's
// releases not yet sent (see deltaLua), then takes one permit for node if
// the live total is under limit, and notifies (see deltaLua) if the node's
// count fell overall. It returns {granted (0 or 1), others, mine after,
// stale, ae}: stale is 1 when the permit was granted after the absolute
// write of snapshot ae, newer than the acquire's epoch, had counted it
// (see above).
var acquireScript = redis.NewScript(liveLua + deltaLua + `
local key, node = KEYS[1], ARGV[1]
local limit, lease, ttl, epoch = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local others, before, h = live(key, node, now)
local ae = tonumber(h['ae:' .. node]) or 0
local ac = tonumber(h['ac:' .. node]) or 0
local mine = delta(key, node, before, ae, epoch, tonumber(ARGV[6]), lease, now)
local granted, stale = 0, 0
local w = tonumber(h['w']) or 0
if others + mine < limit then
  mine = mine + 1
  granted = 1
  if epoch > ae then
    redis.call('HSET', key, 'c:' .. node, mine, 'e:' .. node, now + lease, 'ae:' .. node, epoch, 'ac:' .. node, 1)
  elseif epoch == ae and ac >= 0 then
    redis.call('HSET', key, 'c:' .. node, mine, 'e:' .. node, now + lease, 'ac:' .. node, ac + 1)
  else
    if epoch < ae and ac < 0 then stale = 1 end
    redis.call('HSET', key, 'c:' .. node, mine, 'e:' .. node, now + lease)
  end
else
  w = now + lease
  redis.call('HSET', key, 'w', w)
  if mine == 0 then
    redis.call('HDEL', key, 'ae:' .. node, 'ac:' .. node)
  end
end
notify(before, mine, w, now, ARGV[7], ARGV[8])
redis.call('PEXPIRE', key, ttl)
return {granted, others, mine, stale, ae}
`)

// deltaLua defines delta, which adds d to the node's count (floored at 0)
// unless an absolute write of a snapshot newer than epoch already counted
// it (ae > epoch), renews the lease, deletes the count at 0 (the caller
// deletes ae and ac when it is done with them) and returns the new count;
// and notify, which publishes message on channel when a node's count fell
// from old to new while some node was recently refused (until w), so that
// other nodes' waiters retry.
const deltaLua = `
local function delta(key, node, old, ae, epoch, d, lease, now)
  if d == 0 or epoch < ae then return old end
  local new = old + d
  if new < 0 then new = 0 end
  if new > 0 then
    redis.call('HSET', key, 'c:' .. node, new, 'e:' .. node, now + lease)
  else
    redis.call('HDEL', key, 'c:' .. node, 'e:' .. node)
  end
  return new
end
local function notify(old, new, w, now, channel, message)
  if new < old and w > now then
    redis.call('PUBLISH', channel, message)
  end
end
`

// syncScript: KEYS[1] the key's hash; ARGV node, mode, n, lease ms, TTL ms,
// channel, message, epoch. Mode "d" adds n as deltaLua does; mode "a" sets
// the count to n as of snapshot epoch (plus the acquires of that epoch
// Redis granted first; ignored if older than ae) and marks the snapshot
// as applied (ac -1). It renews the node's lease, or deletes its fields at
// 0, and notifies as deltaLua does. It returns {others, mine after}.
var syncScript = redis.NewScript(liveLua + deltaLua + `
local key, node, mode = KEYS[1], ARGV[1], ARGV[2]
local n, lease, ttl, epoch = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[8])
local others, old, h = live(key, node, now)
local ae = tonumber(h['ae:' .. node]) or 0
local new = old
if mode == 'd' then
  new = delta(key, node, old, ae, epoch, n, lease, now)
  if new == 0 then
    redis.call('HDEL', key, 'ae:' .. node, 'ac:' .. node)
  end
elseif epoch >= ae then
  if epoch == ae then
    n = n + math.max(tonumber(h['ac:' .. node]) or 0, 0)
  end
  if n < 0 then n = 0 end
  new = n
  if new > 0 then
    redis.call('HSET', key, 'c:' .. node, new, 'e:' .. node, now + lease, 'ae:' .. node, epoch, 'ac:' .. node, -1)
  else
    redis.call('HDEL', key, 'c:' .. node, 'e:' .. node, 'ae:' .. node, 'ac:' .. node)
  end
end
notify(old, new, tonumber(h['w']) or 0, now, ARGV[6], ARGV[7])
if new > 0 then redis.call('PEXPIRE', key, ttl) end
return {others, new}
`)

// acquireReply is the decoded answer of acquireScript.
type acquireReply struct {
	granted      bool
	others, mine int
	stale        bool  // granted after a write of snapshot ae had counted it
	ae           int64 // the newest snapshot epoch Redis had seen from the node
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
	x, err := ints(v, 5)
	if err != nil {
		return acquireReply{}, err
	}
	return acquireReply{granted: x[0] == 1, others: int(x[1]), mine: int(x[2]), stale: x[3] == 1, ae: x[4]}, nil
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
func (s *Store[K]) runAcquire(ctx context.Context, name string, limit int, epoch int64, delta int, message string) (acquireReply, error) {
	lease := s.s.Lease.Milliseconds()
	v, err := acquireScript.Run(ctx, s.s.Client, []string{name},
		s.s.NodeID, limit, lease, 2*lease, epoch, delta, s.s.channel, message).Result()
	if err != nil {
		return acquireReply{}, fmt.Errorf("redisstore: acquire script: %w", err)
	}
	return decodeAcquire(v)
}
