package limit

// A table maps keys to their entries inside one shard. It is an
// open-addressing hash table with linear probing keyed by the hash the
// limiter already computed to pick the shard, so a lookup hashes the key
// once instead of twice (a Go map would hash it again). Deletion shifts
// the following run back, leaving no tombstones, so a table that churns
// keys all day stays as short as the keys busy now. It grows at half full
// and shrinks at an eighth full, so its memory follows the busy keys.
type table[K comparable] struct {
	slots []slot[K] // a power of two long, or nil when empty
	n     int
}

type slot[K comparable] struct {
	hash uint64
	e    *entry[K]
}

const minTableSlots = 8

// home is the first slot to probe for hash h. The low bits chose the shard,
// so the table uses high bits.
func (t *table[K]) home(h uint64) int {
	return int((h >> 24) & uint64(len(t.slots)-1))
}

func (t *table[K]) get(h uint64, key K) *entry[K] {
	if t.n == 0 {
		return nil
	}
	mask := len(t.slots) - 1
	for i := t.home(h); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.e == nil {
			return nil
		}
		if s.hash == h && s.e.key == key {
			return s.e
		}
	}
}

// put adds e, whose key is not in the table.
func (t *table[K]) put(h uint64, e *entry[K]) {
	if 2*(t.n+1) > len(t.slots) {
		t.resize(max(2*len(t.slots), minTableSlots))
	}
	t.place(h, e)
	t.n++
}

func (t *table[K]) place(h uint64, e *entry[K]) {
	mask := len(t.slots) - 1
	i := t.home(h)
	for t.slots[i].e != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = slot[K]{h, e}
}

// del removes e, which is in the table under hash h.
func (t *table[K]) del(h uint64, e *entry[K]) {
	mask := len(t.slots) - 1
	i := t.home(h)
	for t.slots[i].e != e {
		i = (i + 1) & mask
	}
	// Shift back every following slot of the run that may move into the
	// hole: one whose home lies cyclically outside (i, j].
	for j := (i + 1) & mask; t.slots[j].e != nil; j = (j + 1) & mask {
		k := t.home(t.slots[j].hash)
		if i <= j {
			if i < k && k <= j {
				continue
			}
		} else if i < k || k <= j {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = slot[K]{}
	t.n--
	if len(t.slots) > minTableSlots && 8*t.n < len(t.slots) {
		t.resize(len(t.slots) / 2)
	}
}

func (t *table[K]) resize(size int) {
	old := t.slots
	t.slots = make([]slot[K], size)
	for _, s := range old {
		if s.e != nil {
			t.place(s.hash, s.e)
		}
	}
}

// each calls f for every entry.
func (t *table[K]) each(f func(*entry[K])) {
	for _, s := range t.slots {
		if s.e != nil {
			f(s.e)
		}
	}
}
