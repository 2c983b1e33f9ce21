package proxyauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"sync"
)

// digest identifies one (user, password) pair without holding either: an
// HMAC-SHA-256 under a key drawn when the Authenticator is made and never
// shown, so that the cache holds nothing a memory dump could turn back into
// a password, and a client cannot forge a pair that collides with another.
type digest [sha256.Size]byte

// digester computes digests under one secret key.
type digester struct {
	pool sync.Pool // of *digestState
}

// digestState is an HMAC under the key and a buffer for its input, reused
// so that a digest costs no allocation.
type digestState struct {
	h   hash.Hash
	buf []byte
	sum []byte
}

func newDigester() *digester {
	var key [32]byte
	_, _ = rand.Read(key[:]) // crypto/rand.Read never fails (Go 1.24+)
	d := &digester{}
	d.pool.New = func() any { return &digestState{h: hmac.New(sha256.New, key[:])} }
	return d
}

// of returns the digest of (user, pass). The user's length goes first so
// that ("ab", "c") and ("a", "bc") differ.
func (d *digester) of(user, pass string) digest {
	st := d.pool.Get().(*digestState)
	st.buf = binary.BigEndian.AppendUint32(st.buf[:0], uint32(len(user)))
	st.buf = append(st.buf, user...)
	st.buf = append(st.buf, pass...)
	st.h.Reset()
	st.h.Write(st.buf)
	st.sum = st.h.Sum(st.sum[:0])
	var out digest
	copy(out[:], st.sum)
	d.pool.Put(st)
	return out
}

// credCache remembers the digests of credentials bcrypt has verified, so
// that a client sending the same credentials again is not made to wait for
// bcrypt. It holds at most max digests: adding one to a full cache forgets
// an arbitrary other. It belongs to one generation of the user set and is
// dropped with it on reload.
type credCache struct {
	max int // ≤ 0: remember nothing
	mu  sync.RWMutex
	m   map[digest]struct{}
}

func newCredCache(max int) *credCache {
	return &credCache{max: max, m: make(map[digest]struct{})}
}

func (c *credCache) has(d digest) bool {
	c.mu.RLock()
	_, ok := c.m[d]
	c.mu.RUnlock()
	return ok
}

func (c *credCache) add(d digest) {
	if c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[d]; ok {
		return
	}
	if len(c.m) >= c.max {
		for k := range c.m { // random order: an arbitrary entry
			delete(c.m, k)
			break
		}
	}
	c.m[d] = struct{}{}
}

func (c *credCache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
