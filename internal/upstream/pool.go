package upstream

import (
	"sync"
	"time"
)

// idlePool holds idle connections per dial address, newest on top. Expired
// connections are dropped when a take meets them and by a sweep that one
// timer per pool runs while the pool holds any connection. With a total
// cap, the idle connections of every address are also kept in one list in
// the order they became idle, so that a full pool closes the oldest idle
// connection, whatever its address, to keep a new one.
type idlePool struct {
	maxPerHost int           // ≤ 0: nothing is kept
	maxTotal   int           // ≤ 0: no cap on the total
	timeout    time.Duration // ≤ 0: connections never expire
	now        func() time.Time

	mu      sync.Mutex
	hosts   map[string][]*conn
	count   int
	oldest  *conn       // head of the list of every idle connection
	newest  *conn       // its tail
	sweeper *time.Timer // armed while count > 0 and timeout > 0
	evicted uint64      // connections closed to make room under maxTotal
}

func newIdlePool(maxPerHost, maxTotal int, timeout time.Duration) *idlePool {
	return &idlePool{maxPerHost: maxPerHost, maxTotal: maxTotal, timeout: timeout, now: time.Now, hosts: make(map[string][]*conn)}
}

// link appends c, which just became idle, to the list.
func (p *idlePool) link(c *conn) {
	c.older, c.newer = p.newest, nil
	if p.newest != nil {
		p.newest.newer = c
	} else {
		p.oldest = c
	}
	p.newest = c
}

// unlink removes c from the list.
func (p *idlePool) unlink(c *conn) {
	if c.older != nil {
		c.older.newer = c.newer
	} else {
		p.oldest = c.newer
	}
	if c.newer != nil {
		c.newer.older = c.older
	} else {
		p.newest = c.older
	}
	c.older, c.newer = nil, nil
}

// take returns the newest idle connection to addr, or nil when there is
// none or it has expired at now; then it closes it and every older one of
// addr.
func (p *idlePool) take(addr string, now time.Time) *conn {
	p.mu.Lock()
	stack := p.hosts[addr]
	if len(stack) == 0 {
		p.mu.Unlock()
		return nil
	}
	c := stack[len(stack)-1]
	stack[len(stack)-1] = nil
	stack = stack[:len(stack)-1]
	p.count--
	p.unlink(c)
	if p.timeout > 0 && now.Sub(c.idleSince) >= p.timeout {
		// The newest has expired: so has everything below it.
		p.dropLocked(addr, stack, c)
		p.mu.Unlock()
		return nil
	}
	p.hosts[addr] = stack
	p.mu.Unlock()
	return c
}

// dropLocked closes c, already out of the pool, and every connection of
// stack, which are older.
func (p *idlePool) dropLocked(addr string, stack []*conn, c *conn) {
	c.nc.Close()
	for i, old := range stack {
		p.unlink(old)
		old.nc.Close()
		stack[i] = nil
	}
	p.count -= len(stack)
	delete(p.hosts, addr)
}

// put keeps c as idle, or closes it when its host already has maxPerHost
// idle connections. When the pool holds maxTotal idle connections, the
// oldest of them is closed to make room. The caller must not use c
// afterwards.
func (p *idlePool) put(c *conn) {
	if p.maxPerHost <= 0 {
		c.nc.Close()
		return
	}
	if p.timeout > 0 {
		c.idleSince = p.now()
	}
	p.mu.Lock()
	stack := p.hosts[c.addr]
	if len(stack) >= p.maxPerHost {
		p.mu.Unlock()
		c.nc.Close()
		return
	}
	var evicted *conn
	if p.maxTotal > 0 && p.count >= p.maxTotal {
		evicted = p.evictOldestLocked()
		stack = p.hosts[c.addr] // the evicted one may have been of this host
	}
	p.hosts[c.addr] = append(stack, c)
	p.count++
	p.link(c)
	if p.timeout > 0 && p.sweeper == nil {
		p.sweeper = time.AfterFunc(p.sweepEvery(), p.sweep)
	}
	p.mu.Unlock()
	if evicted != nil {
		evicted.nc.Close()
	}
}

// evictOldestLocked takes the oldest idle connection out of the pool and
// returns it for the caller to close. It is the bottom of its host's
// stack, since each stack is in the order its connections became idle.
func (p *idlePool) evictOldestLocked() *conn {
	c := p.oldest
	p.unlink(c)
	stack := p.hosts[c.addr]
	if len(stack) == 1 {
		delete(p.hosts, c.addr)
	} else {
		n := copy(stack, stack[1:])
		stack[n] = nil
		p.hosts[c.addr] = stack[:n]
	}
	p.count--
	p.evicted++
	return c
}

// sweepEvery is the sweep period: a connection outlives its timeout by at
// most half of it when nothing takes it.
func (p *idlePool) sweepEvery() time.Duration { return p.timeout / 2 }

// sweep closes the expired connections at the bottom of every stack, and
// re-arms itself while connections remain.
func (p *idlePool) sweep() {
	now := p.now()
	var expired []*conn
	p.mu.Lock()
	for addr, stack := range p.hosts {
		n := 0
		for n < len(stack) && now.Sub(stack[n].idleSince) >= p.timeout {
			n++
		}
		if n == 0 {
			continue
		}
		for _, c := range stack[:n] {
			p.unlink(c)
		}
		expired = append(expired, stack[:n]...)
		if n == len(stack) {
			delete(p.hosts, addr)
			continue
		}
		rest := copy(stack, stack[n:])
		clear(stack[rest:])
		p.hosts[addr] = stack[:rest]
	}
	p.count -= len(expired)
	p.sweeper = nil
	if p.count > 0 {
		p.sweeper = time.AfterFunc(p.sweepEvery(), p.sweep)
	}
	p.mu.Unlock()
	for _, c := range expired {
		c.nc.Close()
	}
}

// closeAll closes every idle connection.
func (p *idlePool) closeAll() {
	p.mu.Lock()
	hosts := p.hosts
	p.hosts = make(map[string][]*conn)
	p.count = 0
	for c := p.oldest; c != nil; {
		next := c.newer
		c.older, c.newer = nil, nil
		c = next
	}
	p.oldest, p.newest = nil, nil
	if p.sweeper != nil {
		p.sweeper.Stop()
		p.sweeper = nil
	}
	p.mu.Unlock()
	for _, stack := range hosts {
		for _, c := range stack {
			c.nc.Close()
		}
	}
}

// idle returns the number of idle connections, and the largest number held
// for one address.
func (p *idlePool) idle() (total, maxHost int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, stack := range p.hosts {
		maxHost = max(maxHost, len(stack))
	}
	return p.count, maxHost
}

// evictions returns how many idle connections were closed to make room.
func (p *idlePool) evictions() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.evicted
}
