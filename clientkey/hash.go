package clientkey

import "hash/maphash"

// hashSeed is random per process, so that clients cannot pick addresses
// whose keys collide in a hash table.
var hashSeed = maphash.MakeSeed()

// Hash returns a hash of k: equal keys hash equally, and the seed is chosen
// at random when the process starts. It allocates nothing; use it as
// limit.Config.Hash for limiters keyed by Key.
func (k Key) Hash() uint64 {
	var b [17]byte
	a := k.prefix.Addr().As16()
	copy(b[:], a[:])
	b[16] = byte(k.prefix.Bits())
	return maphash.Bytes(hashSeed, b[:])
}
