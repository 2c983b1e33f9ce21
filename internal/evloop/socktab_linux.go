//go:build linux

package evloop

// socketTable finds a worker's sockets by the token their epoll events
// carry: the descriptor in the low 32 bits, which indexes a slice (a
// descriptor number is one open socket's while it is open), and a
// generation in the high 32, so that an event that comes for a socket
// already closed finds nothing, even when its number went to a new one.
// An index instead of a map: the lookup runs for every event.
type socketTable struct {
	slots []tableSlot
	n     int
	gen   uint32
}

type tableSlot struct {
	token uint64
	s     socket
}

// token returns a new token for a socket on fd. It is never wakeToken.
func (t *socketTable) token(fd int) uint64 {
	t.gen++
	if t.gen == 0 {
		t.gen = 1
	}
	return uint64(uint32(fd)) | uint64(t.gen)<<32
}

func (t *socketTable) add(token uint64, s socket) {
	i := int(uint32(token))
	if i >= len(t.slots) {
		t.slots = append(t.slots, make([]tableSlot, i+1-len(t.slots))...)
		t.slots = t.slots[:cap(t.slots)]
	}
	if t.slots[i].s == nil {
		t.n++
	}
	t.slots[i] = tableSlot{token, s}
}

func (t *socketTable) remove(token uint64) {
	i := int(uint32(token))
	if i < len(t.slots) && t.slots[i].token == token && t.slots[i].s != nil {
		t.slots[i] = tableSlot{}
		t.n--
	}
}

// get returns the socket token was given to, or nil once it was removed.
func (t *socketTable) get(token uint64) socket {
	i := int(uint32(token))
	if i < len(t.slots) && t.slots[i].token == token {
		return t.slots[i].s
	}
	return nil
}

func (t *socketTable) len() int { return t.n }

// each calls fn for every socket in the table. fn may remove sockets and
// add some (which each may or may not visit): t.slots is read again at
// every step, as an add may have moved it.
func (t *socketTable) each(fn func(socket)) {
	for i := 0; i < len(t.slots); i++ {
		if s := t.slots[i].s; s != nil {
			fn(s)
		}
	}
}
