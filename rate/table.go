package rate

// A table maps the keys of one shard to their theoretical arrival times. It
// is an open-addressing hash table with linear probing, laid out for
// memory: a dense array of 32-bit tags (the high half of the key's hash,
// never zero; zero marks an empty slot) beside an array of (key, TAT)
// entries. A probe scans tags, which sit sixteen to a cache line, and
// compares keys only when the tags match, so the table can run up to 7/8
// full: with string keys a slot is 28 bytes and a busy key costs 32 to 64
// bytes. The home slot is derived from the tag, so deletion can shift a run
// back without hashing keys again, and leaves no tombstones.
//
// A key whose TAT is not after now is in a fresh state: it is as if
// absent. Such entries are reused by inserts that meet them, dropped by
// sweep, and dropped before the table grows, so the table holds only the
// keys active within about one burst window.
type table[K comparable] struct {
	tags    []uint32
	entries []entry[K]
	n       int // occupied slots, fresh-state ones included
}

type entry[K comparable] struct {
	key K
	tat int64
}

const minTableSlots = 8

// tagOf returns the tag of a hash: its high 32 bits, never zero. The low
// bits chose the shard, so they would not spread keys within one.
func tagOf(h uint64) uint32 {
	if t := uint32(h >> 32); t != 0 {
		return t
	}
	return 1
}

func (t *table[K]) mask() int { return len(t.tags) - 1 }

// find returns the slot of key, or -1.
func (t *table[K]) find(tag uint32, key K) int {
	if t.n == 0 {
		return -1
	}
	mask := t.mask()
	for i := int(tag) & mask; ; i = (i + 1) & mask {
		switch t.tags[i] {
		case 0:
			return -1
		case tag:
			if t.entries[i].key == key {
				return i
			}
		}
	}
}

// insert adds key, which is not in the table, with TAT tat. It reuses the
// first fresh-state slot on the key's probe path, and makes room (sweeping
// fresh-state entries, then growing) when the table is 7/8 full.
// tat returns the slot of key (-1: none) and its theoretical arrival
// time (0 for a key in a fresh state).
func (t *table[K]) tat(tag uint32, key K) (int, int64) {
	i := t.find(tag, key)
	if i < 0 {
		return i, 0
	}
	return i, t.entries[i].tat
}

// advance records next as the TAT of key, found at slot i by tat (which
// returned tat), when a decision moved it past now; a key still fresh
// after it is not stored.
func (t *table[K]) advance(i int, tag uint32, key K, tat, next, now int64) {
	if next == tat || next <= now {
		return
	}
	if i >= 0 {
		t.entries[i].tat = next
	} else {
		t.insert(tag, key, next, now)
	}
}

func (t *table[K]) insert(tag uint32, key K, tat, now int64) {
	if 8*(t.n+1) > 7*len(t.tags) {
		t.makeRoom(now)
	}
	mask := t.mask()
	i := int(tag) & mask
	for t.tags[i] != 0 {
		if t.entries[i].tat <= now {
			// A fresh-state entry on the path: take its slot. The key is
			// not further on (the caller looked), so this is where a
			// probe for it will stop.
			t.tags[i], t.entries[i] = tag, entry[K]{key, tat}
			return
		}
		i = (i + 1) & mask
	}
	t.tags[i], t.entries[i] = tag, entry[K]{key, tat}
	t.n++
}

// makeRoom drops fresh-state entries; if that did not free at least an
// eighth of the slots, it doubles the table, so that sweeping stays
// amortised constant per insert.
func (t *table[K]) makeRoom(now int64) {
	if len(t.tags) == 0 {
		t.resize(minTableSlots)
		return
	}
	freed := t.sweep(now, 0, len(t.tags))
	if 8*freed < len(t.tags) || 8*(t.n+1) > 7*len(t.tags) {
		t.resize(2 * len(t.tags))
	}
}

// del empties slot i and shifts back the entries of the run after it that
// may move closer to their home.
func (t *table[K]) del(i int) {
	mask := t.mask()
	for j := (i + 1) & mask; t.tags[j] != 0; j = (j + 1) & mask {
		k := int(t.tags[j]) & mask
		if i <= j {
			if i < k && k <= j {
				continue
			}
		} else if i < k || k <= j {
			continue
		}
		t.tags[i], t.entries[i] = t.tags[j], t.entries[j]
		i = j
	}
	t.tags[i] = 0
	t.entries[i] = entry[K]{}
	t.n--
}

// sweep drops the fresh-state entries among count slots from start and
// returns how many it dropped. An entry shifted back into a slot already
// passed is left for the next sweep.
func (t *table[K]) sweep(now int64, start, count int) int {
	if t.n == 0 {
		return 0
	}
	dropped := 0
	end := min(start+count, len(t.tags))
	for i := start; i < end; {
		if t.tags[i] != 0 && t.entries[i].tat <= now {
			t.del(i)
			dropped++
			continue // something may have moved into i
		}
		i++
	}
	return dropped
}

// shrinkIfSparse halves the table while it is less than 7/32 full, so
// that after a burst of keys its memory follows the keys busy now.
func (t *table[K]) shrinkIfSparse() {
	size := len(t.tags)
	for size > minTableSlots && 32*t.n < 7*size {
		size /= 2
	}
	if size != len(t.tags) {
		t.resize(size)
	}
}

func (t *table[K]) resize(size int) {
	tags, entries := t.tags, t.entries
	t.tags = make([]uint32, size)
	t.entries = make([]entry[K], size)
	mask := size - 1
	for i, tag := range tags {
		if tag == 0 {
			continue
		}
		j := int(tag) & mask
		for t.tags[j] != 0 {
			j = (j + 1) & mask
		}
		t.tags[j], t.entries[j] = tag, entries[i]
	}
}
