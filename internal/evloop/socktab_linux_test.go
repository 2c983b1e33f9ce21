//go:build linux

package evloop

import "testing"

type fakeSocket struct{ name string }

func (*fakeSocket) ready(uint32) {}

func TestSocketTable(t *testing.T) {
	var tab socketTable
	a, b := &fakeSocket{"a"}, &fakeSocket{"b"}
	ta := tab.token(7)
	if ta == wakeToken || uint32(ta) != 7 {
		t.Fatalf("token(7) = %#x", ta)
	}
	tab.add(ta, a)
	if got := tab.get(ta); got != a || tab.len() != 1 {
		t.Fatalf("get = %v, len %d", got, tab.len())
	}
	tab.remove(ta)
	if got := tab.get(ta); got != nil || tab.len() != 0 {
		t.Fatalf("after remove: get = %v, len %d", got, tab.len())
	}
	// The descriptor goes to a new socket: the old token finds nothing,
	// and removing by it leaves the new socket in place.
	tb := tab.token(7)
	tab.add(tb, b)
	if tb == ta {
		t.Fatal("the same token twice for one descriptor")
	}
	if got := tab.get(ta); got != nil {
		t.Fatalf("old token finds %v", got)
	}
	tab.remove(ta)
	if got := tab.get(tb); got != b || tab.len() != 1 {
		t.Fatalf("new socket: get = %v, len %d", got, tab.len())
	}
	if got := tab.get(uint64(1)<<32 | 5000); got != nil {
		t.Fatalf("unknown descriptor finds %v", got)
	}
}

func TestSocketTableEachWhileChanging(t *testing.T) {
	var tab socketTable
	var tokens []uint64
	for fd := range 8 {
		tok := tab.token(fd)
		tab.add(tok, &fakeSocket{})
		tokens = append(tokens, tok)
	}
	// Each visit removes its socket and adds one far beyond the slice,
	// which moves it: no socket is visited twice, every first one once.
	seen := map[socket]int{}
	next := 1000
	tab.each(func(s socket) {
		seen[s]++
		for _, tok := range tokens {
			if tab.get(tok) == s {
				tab.remove(tok)
			}
		}
		if next < 1004 {
			tab.add(tab.token(next), &fakeSocket{})
			next++
		}
	})
	for s, n := range seen {
		if n != 1 {
			t.Errorf("socket %p visited %d times", s, n)
		}
	}
	if len(seen) < 8 {
		t.Errorf("visited %d sockets, want the 8 at least", len(seen))
	}
	if tab.len() > 4 {
		t.Errorf("len = %d after removing the first 8 and adding 4", tab.len())
	}
}
