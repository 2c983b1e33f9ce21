package redisstore

// Freeze stops s's heartbeat, batches and subscription as if its process
// had hung, without giving its permits back: its leases run out in Redis.
func (s *Store[K]) Freeze() {
	s.frozen.Store(true)
	s.stop()
}
