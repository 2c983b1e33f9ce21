package main

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// TestMemoryReturnerDue checks when the returner gives memory back: only
// after a look with no collection since the one before, a heap holding
// more than the floor, and heap objects changed since the last return.
func TestMemoryReturnerDue(t *testing.T) {
	m := &memoryReturner{floor: 100, last: heapSample{cycles: 5}}
	steps := []struct {
		name string
		s    heapSample
		want bool
	}{
		{"a collection ran", heapSample{cycles: 6, objects: 500, retained: 900}, false},
		{"idle, over the floor", heapSample{cycles: 6, objects: 500, retained: 900}, true},
		// returned(...) below
		{"idle, nothing changed since the return", heapSample{cycles: 7, objects: 40, retained: 150}, false},
		{"idle, allocated since", heapSample{cycles: 7, objects: 60, retained: 170}, true},
		{"idle, under the floor", heapSample{cycles: 8, objects: 10, retained: 90}, false},
		{"busy", heapSample{cycles: 20, objects: 5000, retained: 9000}, false},
	}
	for i, st := range steps {
		if got := m.due(st.s); got != st.want {
			t.Errorf("%s: due = %v, want %v", st.name, got, st.want)
		}
		switch i {
		case 1:
			m.returned(heapSample{cycles: 7, objects: 40, retained: 150})
		case 3:
			m.returned(heapSample{cycles: 8, objects: 10, retained: 90})
		}
	}
}

var burstSink [][]byte

// TestGiveBackMemoryAfterBurst leaves 256 MiB of garbage on the heap, as
// connections that held heads and closed do, with no collection after it,
// and checks that giveBackMemory returns it to the system: without it the
// heap keeps it until the runtime's next forced collection, two minutes
// on.
func TestGiveBackMemoryAfterBurst(t *testing.T) {
	runtime.GC()
	for range 256 {
		burstSink = append(burstSink, make([]byte, 1<<20))
	}
	burstSink = nil // garbage now; nothing collects it
	if s := readHeap(); s.retained < 200<<20 {
		t.Skipf("the heap retains %d bytes after the burst: a collection ran meanwhile", s.retained)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		giveBackMemory(ctx, 20*time.Millisecond, 64<<20)
	}()
	defer func() {
		cancel()
		<-done
	}()
	var s heapSample
	if !waitfor.Until(5*time.Second, func() bool { s = readHeap(); return s.retained < 64<<20 }) {
		t.Fatalf("the heap still retains %d bytes 5 s after the burst", s.retained)
	}
}
