package livepage

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeSource is a daemon of one listener with one limit whose refusal
// counts the test sets.
type fakeSource struct {
	mu       sync.Mutex
	conns    uint64 // refused at accept
	requests uint64 // refused by the limit
	extra    bool   // a second listener, as a reload adds
	calls    int
}

func (f *fakeSource) set(conns, requests uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conns, f.requests = conns, requests
}

func (f *fakeSource) LiveState(ctx context.Context) State {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	st := State{Time: time.Now(), Listeners: []Listener{{
		Row:    Row{ID: "web", Name: "web", Refused: f.conns},
		Limits: []Row{{ID: "web/route/slow", Name: "route slow", Refused: f.requests}},
	}}}
	if f.extra {
		st.Listeners = append(st.Listeners, Listener{Row: Row{ID: "more", Name: "more", Refused: 7}})
	}
	return st
}

// The Sampler turns counters into rates per row and per second, and its
// history holds one sample a second, oldest first.
func TestSamplerRates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{}
		src.set(10, 4) // counted before the Sampler started: a baseline
		s := NewSampler(src, time.Second)
		defer s.Close()
		synctest.Wait()

		f, _, next := s.Latest()
		if len(f.History.Accept) != 0 || f.Listeners[0].RefusedPerSec != 0 {
			t.Fatalf("first frame: history %v, rate %v; want none and 0", f.History.Accept, f.Listeners[0].RefusedPerSec)
		}
		src.set(15, 4)
		time.Sleep(time.Second)
		<-next
		src.set(15, 7)
		time.Sleep(time.Second)
		synctest.Wait()
		f, raw, _ := s.Latest()
		if got, want := f.History.Accept, []float64{5, 0}; !slices.Equal(got, want) {
			t.Errorf("accept history %v, want %v", got, want)
		}
		if got, want := f.History.Requests, []float64{0, 3}; !slices.Equal(got, want) {
			t.Errorf("requests history %v, want %v", got, want)
		}
		if r := f.Listeners[0].Limits[0].RefusedPerSec; r != 3 {
			t.Errorf("route rate %v, want 3", r)
		}
		var decoded Frame
		if err := json.Unmarshal(raw, &decoded); err != nil || decoded.Listeners[0].Limits[0].Refused != 7 {
			t.Errorf("JSON of the frame: %v, %s", err, raw)
		}
	})
}

// A count that goes down (a reload replaced the limiter) and a row that
// appears count all their refusals as new.
func TestSamplerCountsResetsAndNewRows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{}
		src.set(100, 50)
		s := NewSampler(src, time.Second)
		defer s.Close()
		synctest.Wait()
		src.mu.Lock()
		src.conns, src.requests, src.extra = 2, 50, true
		src.mu.Unlock()
		time.Sleep(time.Second)
		synctest.Wait()
		f, _, _ := s.Latest()
		if got := f.History.Accept; !slices.Equal(got, []float64{2 + 7}) {
			t.Errorf("accept history %v, want [9]: the reset listener's 2 and the new one's 7", got)
		}
		if r := f.Listeners[1].RefusedPerSec; r != 7 {
			t.Errorf("new listener's rate %v, want 7", r)
		}
	})
}

// The history keeps the last HistoryLen samples.
func TestSamplerHistoryIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{}
		s := NewSampler(src, time.Second)
		defer s.Close()
		synctest.Wait()
		const n = HistoryLen + 100
		for i := 1; i <= n; i++ {
			src.set(uint64(i*(i+1)/2), 0) // i refusals in second i
			time.Sleep(time.Second)
			synctest.Wait()
		}
		h := s.frameNow().History
		if len(h.Accept) != HistoryLen || len(h.Requests) != HistoryLen {
			t.Fatalf("history of %d and %d samples, want %d", len(h.Accept), len(h.Requests), HistoryLen)
		}
		if h.Accept[0] != n-HistoryLen+1 || h.Accept[HistoryLen-1] != n {
			t.Errorf("history runs from %v to %v, want %d to %d", h.Accept[0], h.Accept[HistoryLen-1], n-HistoryLen+1, n)
		}
	})
}

// Sample takes a sample at once, with the counts but no rates, and adds
// nothing to the history.
func TestSamplerSampleNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{}
		s := NewSampler(src, time.Second)
		defer s.Close()
		synctest.Wait()
		src.set(3, 0)
		s.Sample()
		synctest.Wait()
		f := s.frameNow()
		if f.Listeners[0].Refused != 3 || f.Listeners[0].RefusedPerSec != 0 || len(f.History.Accept) != 0 {
			t.Fatalf("after Sample: refused %d at %v/s, history %v; want 3, 0, none",
				f.Listeners[0].Refused, f.Listeners[0].RefusedPerSec, f.History.Accept)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if h := s.frameNow().History.Accept; !slices.Equal(h, []float64{3}) {
			t.Errorf("history after the first tick %v, want [3]: the rate counts from the first sample", h)
		}
	})
}

// Close stops the sampling goroutine (synctest.Test fails on a goroutine
// left blocked in the bubble), closes Done, and may be called again.
func TestSamplerCloseStopsItsGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{}
		s := NewSampler(src, time.Second)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		s.Close()
		s.Close()
		select {
		case <-s.Done():
		default:
			t.Fatal("Done not closed after Close")
		}
		src.mu.Lock()
		calls := src.calls
		src.mu.Unlock()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		src.mu.Lock()
		defer src.mu.Unlock()
		if calls != 4 || src.calls != calls {
			t.Errorf("source asked %d times in 3 s, then %d more after Close; want 4 (one at once, one a second), then none", calls, src.calls-calls)
		}
	})
}

func (s *Sampler) frameNow() Frame {
	f, _, _ := s.Latest()
	return f
}

// healthSource is a daemon whose listener's requests, upstream errors and
// shadow refusals grow by step at each sample.
type healthSource struct {
	mu   sync.Mutex
	step uint64
	n    uint64
}

func (h *healthSource) LiveState(ctx context.Context) State {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.n
	h.n += h.step
	return State{Time: time.Now(), Listeners: []Listener{{
		Row:      Row{ID: "web", Name: "web"},
		Requests: &Requests{Total: 3 * n, Classes: []Count{{Name: "2xx", Count: 2 * n}, {Name: "499", Count: n}}},
	}},
		Upstream: []UpstreamErrors{{ID: "web/down/refused", Count: n}},
		Shadow:   []Shadow{{ID: "web/route/slow/shadow", WouldRefuse: 4 * n}},
	}
}

// The Sampler turns the request, upstream error and shadow counters into
// rates per second, as it does refusals.
func TestSamplerHealthRates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &healthSource{step: 5}
		s := NewSampler(src, time.Second)
		defer s.Close()
		synctest.Wait()
		if f, _, _ := s.Latest(); f.Listeners[0].Requests.PerSec != 0 {
			t.Fatalf("first frame: %v requests/s, want 0", f.Listeners[0].Requests.PerSec)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		f, _, _ := s.Latest()
		q := f.Listeners[0].Requests
		if q.PerSec != 15 || q.Classes[0].PerSec != 10 || q.Classes[1].PerSec != 5 {
			t.Errorf("requests: %+v, want 15/s, 2xx 10/s, 499 5/s", q)
		}
		if u := f.Upstream[0].PerSec; u != 5 {
			t.Errorf("upstream errors %v/s, want 5", u)
		}
		if sh := f.Shadow[0].PerSec; sh != 20 {
			t.Errorf("shadow refusals %v/s, want 20", sh)
		}
	})
}
