package connlimit

import (
	"sync"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

// liveConns lists a Listener's open connections and the connections it
// adopted, for Adopt. Adding and removing is a pointer swap under a mutex,
// once per connection.
//
// Lock order: a Listener's mu may be held while taking the mu of a
// Listener it adopted from (an older one), never the other way round.
type liveConns struct {
	mu      sync.Mutex
	head    *Conn     // connections this Listener admitted
	adopted *adoption // connections it adopted
}

func (lc *liveConns) add(c *Conn) {
	lc.mu.Lock()
	c.next = lc.head
	if lc.head != nil {
		lc.head.prev = c
	}
	lc.head = c
	lc.mu.Unlock()
}

// remove unlinks c, which this list holds, and returns the adoptions of c
// for the caller to release outside the lock.
func (lc *liveConns) remove(c *Conn) []*adoption {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		lc.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	}
	c.prev, c.next = nil, nil
	c.gone = true
	a := c.adopted
	c.adopted = nil
	return a
}

func (lc *liveConns) addAdoption(a *adoption) {
	a.linked = true
	a.next = lc.adopted
	if lc.adopted != nil {
		lc.adopted.prev = a
	}
	lc.adopted = a
}

func (lc *liveConns) removeAdoption(a *adoption) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if !a.linked {
		return
	}
	a.linked = false
	if a.prev != nil {
		a.prev.next = a.next
	} else {
		lc.adopted = a.next
	}
	if a.next != nil {
		a.next.prev = a.prev
	}
	a.prev, a.next = nil, nil
}

// An adoption is what a Listener counts for a connection it adopted.
type adoption struct {
	l          *Listener
	c          *Conn
	key        clientkey.Key
	exempt     bool
	ps         permits
	token      bool      // holds a MaxConns place
	prev, next *adoption // in l.live.adopted, while linked
	linked     bool
}

// end gives back what a counted for its connection, which closed.
func (a *adoption) end() {
	a.l.live.removeAdoption(a)
	a.ps.release()
	if a.l.syn != nil && !a.exempt {
		a.l.syn.released(a.key)
	}
	a.l.stats.open.Add(-1)
	if a.token {
		a.l.giveToken()
	}
}

// Adopt counts the open connections of prev as if l had admitted them, and
// returns how many it adopted. It is for a reload that replaces prev with
// l (on the same socket, or at a new address under the same name): prev's
// connections drain, and without adoption each client could hold its cap
// on prev and again on l. The connections prev had itself adopted are
// adopted too, so a connection stays counted across any number of reloads.
// Adopted connections are never refused, since they are already open:
// their slots may take a key above l's caps, and l then refuses that key's
// new connections until enough of them close. Each is keyed by l's rules
// (its keyer, levels and trusted proxies) from the address it was first
// keyed by. A connection counts in l until its Close, which gives back its
// slots in every Listener that counted it; it holds a MaxConns place in l
// only if one was free. Adopted slots count in this process only, never in
// a Store (the first Listener's slots still count there).
//
// Call Adopt once prev no longer accepts (after prev.Close), so that no
// connection prev admits later is missed, and only once per pair.
func (l *Listener) Adopt(prev *Listener) int {
	l.live.mu.Lock() // newest first, as the lock order says
	defer l.live.mu.Unlock()
	prev.live.mu.Lock()
	defer prev.live.mu.Unlock()
	n := 0
	for c := prev.live.head; c != nil; c = c.next {
		l.adoptLocked(c)
		n++
	}
	for pa := prev.live.adopted; pa != nil; pa = pa.next {
		c := pa.c
		c.l.live.mu.Lock() // an older Listener's lock, inside prev's
		if !c.gone {
			l.adoptLocked(c)
			n++
		}
		c.l.live.mu.Unlock()
	}
	return n
}

// adoptLocked takes c's slots in l and links the adoption to c and to l.
// It is called with l's lock and the lock of c's own Listener held, c not
// yet closed.
func (l *Listener) adoptLocked(c *Conn) {
	a := l.adopt(c)
	c.adopted = append(c.adopted, a)
	l.live.addAdoption(a)
}

// adopt takes c's slots in l. It is called with the lock of c's own
// Listener held, c not yet closed.
func (l *Listener) adopt(c *Conn) *adoption {
	peer := peerAddr(c.conn.RemoteAddr())
	a := &adoption{l: l, c: c, key: l.levels[0].keyer.FromAddr(c.client)}
	// As at admission: a trusted peer is exempt unless a PROXY header named
	// its client.
	a.exempt = (c.remote == nil && l.s.Trusted.Contains(peer)) || !a.key.IsValid()
	if !a.exempt {
		for i := range l.levels {
			lv := &l.levels[i]
			if lv.appliesTo(c.client) {
				a.ps.add(lv.lim.AcquireOver(lv.keyer.FromAddr(c.client)))
			}
		}
		if l.syn != nil {
			l.syn.admitted(a.key)
		}
	}
	if l.tokens != nil {
		select {
		case l.tokens <- struct{}{}:
			a.token = true
		default:
		}
	}
	l.stats.open.Add(1)
	return a
}
