package main

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Giving memory back after a burst. With the collector's target at
// gcPercent, the heap's goal after a burst (thousands of connections each
// holding a head, say) stays at five times the burst's live heap until the
// next collection, which an idle daemon only runs every two minutes (the
// runtime's forced collection); until then the memory the burst left
// stays resident, and the runtime's scavenger, which returns only what
// lies beyond the goal, keeps it. So the daemon looks every
// memoryCheckEvery: when no collection ran since its last look, the heap
// holds more than memoryFloor bytes the system has not been given back,
// and the heap changed since it last gave memory back, it collects and
// returns what is free (debug.FreeOSMemory). Under load the collector
// runs more often than that and this does nothing; at rest with a small
// heap it does nothing either.
const (
	memoryCheckEvery = 2 * time.Second
	memoryFloor      = 32 << 20
)

// heapSample is what giveBackMemory reads of the runtime.
type heapSample struct {
	cycles   uint64 // collections so far
	objects  uint64 // bytes of heap objects, live or not yet swept
	retained uint64 // heap bytes not returned to the system: objects, and free or unused spans
}

var heapMetrics = []string{
	"/gc/cycles/total:gc-cycles",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
}

func readHeap() heapSample {
	s := make([]metrics.Sample, len(heapMetrics))
	for i, name := range heapMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0 // not supported by this runtime: never gives back
		}
		return s[i].Value.Uint64()
	}
	return heapSample{cycles: v(0), objects: v(1), retained: v(1) + v(2) + v(3)}
}

// memoryReturner decides, from one heapSample to the next, when to give
// memory back.
type memoryReturner struct {
	floor       uint64
	last        heapSample
	lastObjects uint64 // heap objects right after the last return; 0: none yet
}

// due reports whether to collect and give memory back now, given s and
// what the last look found.
func (m *memoryReturner) due(s heapSample) bool {
	idle := s.cycles == m.last.cycles
	m.last = s
	return idle && s.retained > m.floor && s.objects != m.lastObjects
}

// returned records the heap after a return.
func (m *memoryReturner) returned(s heapSample) {
	m.last = s
	m.lastObjects = s.objects
}

// giveBackMemory runs until ctx ends, looking every period whether to
// give memory back (see memoryCheckEvery).
func giveBackMemory(ctx context.Context, period time.Duration, floor uint64) {
	m := &memoryReturner{floor: floor, last: readHeap()}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if m.due(readHeap()) {
			debug.FreeOSMemory()
			m.returned(readHeap())
		}
	}
}
