package livepage

import (
	"context"
	"encoding/json"
	"math"
	"sync"
	"time"
)

// HistoryLen is how many samples of the refusal rates a [Sampler] keeps:
// one a second for 15 minutes.
const HistoryLen = 900

// Source is what a [Sampler] samples: the daemon.
type Source interface {
	// LiveState returns the state now, without rates. The Sampler calls it
	// once a second, from one goroutine at a time; ctx ends when the
	// Sampler is closed. It should return well within a second (a Redis
	// PING it makes gets a short timeout).
	LiveState(ctx context.Context) State
}

// Frame is what the page shows: a [State] with its rates and the refusal
// history. The event stream sends it in JSON.
type Frame struct {
	State
	History History `json:"history"`
}

// History is the refusals per second over the last samples, oldest first,
// one sample a second, at most [HistoryLen] of them.
type History struct {
	// End is the time of the newest sample.
	End time.Time `json:"end"`
	// Accept counts refusals at accept: connections (and QUIC handshakes)
	// closed by a per-client cap or rate.
	Accept []float64 `json:"accept"`
	// Requests counts requests refused by a limit (429, 503 after a queue
	// timeout) or a rate.
	Requests []float64 `json:"requests"`
}

// A Sampler samples a [Source] once a second and keeps the latest [Frame].
// Create it with [NewSampler]; stop it with [Sampler.Close]. It is safe for
// concurrent use.
type Sampler struct {
	src    Source
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	done   chan struct{} // closed when the sampling goroutine has returned
	kick   chan struct{} // asks for a sample now (Sample)

	mu       sync.Mutex // guards what follows; the goroutine alone samples
	frame    Frame
	json     []byte
	next     chan struct{} // closed at the next sample
	prev     map[string]uint64
	prevAt   time.Time
	accept   ring
	requests ring
}

// NewSampler starts sampling src on a goroutine of its own: a first
// sample at once, then one every interval (zero means a second), until
// [Sampler.Close]. It does not wait for the first sample (a Source may
// take a while to answer), so that the first Frame may be an empty one.
func NewSampler(src Source, interval time.Duration) *Sampler {
	if interval <= 0 {
		interval = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sampler{
		src: src, ctx: ctx, cancel: cancel,
		done: make(chan struct{}), kick: make(chan struct{}, 1), next: make(chan struct{}),
	}
	s.frame = Frame{State: State{Listeners: []Listener{}, Keys: []Key{}, QUIC: []QUIC{}, Upstream: []UpstreamErrors{}, Shadow: []Shadow{}},
		History: History{Accept: []float64{}, Requests: []float64{}}}
	s.json, _ = json.Marshal(s.frame)
	go s.run(interval)
	return s
}

// Sample asks for a sample now, besides the ticks, without waiting for it;
// it has no rates and adds nothing to the history (which holds one sample
// a tick). A daemon calls it once its listeners serve, so that the page
// shows them before the first tick.
func (s *Sampler) Sample() {
	select {
	case s.kick <- struct{}{}:
	default: // one is asked for already
	}
}

// sampleKind says what a sample does besides making the latest Frame.
type sampleKind int

const (
	sampleFirst sampleKind = iota // counts the baseline of the rates
	sampleTick                    // computes the rates, adds to the history
	sampleExtra                   // neither
)

func (s *Sampler) run(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	s.sample(sampleFirst)
	for {
		select {
		case <-t.C:
			s.sample(sampleTick)
		case <-s.kick:
			s.sample(sampleExtra)
		case <-s.ctx.Done():
			return
		}
	}
}

// Close stops the sampling, waits for its goroutine to return, and ends
// every event stream served from s. It is safe to call more than once; the
// latest Frame stays readable.
func (s *Sampler) Close() {
	s.cancel()
	<-s.done
}

// Done returns a channel closed once Close has been called.
func (s *Sampler) Done() <-chan struct{} { return s.ctx.Done() }

// sampled returns the latest Frame, waiting for the first sample if there
// has been none yet, until ctx ends or s is closed (then the empty Frame).
func (s *Sampler) sampled(ctx context.Context) Frame {
	f, _, next := s.Latest()
	if !f.Time.IsZero() {
		return f
	}
	select {
	case <-next:
	case <-ctx.Done():
	case <-s.Done():
	}
	f, _, _ = s.Latest()
	return f
}

// Latest returns the latest Frame, its JSON, and a channel closed when the
// next one is ready. Before the first sample the Frame is empty, with a
// zero Time. The Frame is shared: callers must not modify it.
func (s *Sampler) Latest() (Frame, []byte, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.frame, s.json, s.next
}

// sample asks the source for its state and makes it the latest Frame.
func (s *Sampler) sample(kind sampleKind) {
	st := s.src.LiveState(s.ctx)
	if st.Time.IsZero() {
		st.Time = time.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch kind {
	case sampleFirst:
		s.rates(&st)
	case sampleTick:
		accept, requests := s.rates(&st)
		s.accept.push(accept)
		s.requests.push(requests)
	}
	s.frame = Frame{State: st, History: History{End: st.Time, Accept: s.accept.values(), Requests: s.requests.values()}}
	b, err := json.Marshal(s.frame)
	if err != nil {
		// Only a NaN or an infinity could fail, and rates are neither.
		b = []byte(`{}`)
	}
	s.json = b
	close(s.next)
	s.next = make(chan struct{})
}

// rates fills the RefusedPerSec of every row of st, and the PerSec of its
// requests, upstream errors and shadow limits, from the counts of the
// previous tick (or first sample), and returns the refusals per second at
// accept and of requests; st becomes the previous tick. A count new since
// then, or that went down (a reload replaced its limiter, a route's series
// were dropped), counts all it holds as new.
func (s *Sampler) rates(st *State) (accept, requests float64) {
	counts := make(map[string]uint64, len(s.prev))
	secs := st.Time.Sub(s.prevAt).Seconds()
	first := s.prevAt.IsZero() || secs <= 0
	defer func() { s.prev, s.prevAt = counts, st.Time }()
	perSec := func(id string, n uint64) float64 {
		counts[id] = n
		if first {
			return 0
		}
		prev, ok := s.prev[id]
		d := n
		if ok && prev <= n {
			d -= prev
		}
		return round1(float64(d) / secs)
	}
	rate := func(r *Row) float64 {
		r.RefusedPerSec = perSec(r.ID, r.Refused)
		return r.RefusedPerSec
	}
	for i := range st.Listeners {
		l := &st.Listeners[i]
		accept += rate(&l.Row)
		for j := range l.Limits {
			requests += rate(&l.Limits[j])
		}
		if q := l.Requests; q != nil {
			q.PerSec = perSec("requests "+l.ID, q.Total)
			for j := range q.Classes {
				c := &q.Classes[j]
				c.PerSec = perSec("requests "+l.ID+" "+c.Name, c.Count)
			}
		}
	}
	for i := range st.Upstream {
		u := &st.Upstream[i]
		u.PerSec = perSec("upstream "+u.ID, u.Count)
	}
	for i := range st.Shadow {
		sh := &st.Shadow[i]
		sh.PerSec = perSec("shadow "+sh.ID, sh.WouldRefuse)
	}
	return round1(accept), round1(requests)
}

// round1 rounds x to one decimal.
func round1(x float64) float64 { return math.Round(x*10) / 10 }

// ring holds the last HistoryLen values pushed.
type ring struct {
	buf  [HistoryLen]float64
	n    int // values held
	next int // where the next value goes
}

func (r *ring) push(v float64) {
	r.buf[r.next] = v
	r.next = (r.next + 1) % HistoryLen
	r.n = min(r.n+1, HistoryLen)
}

// values returns the values held, oldest first, in a new slice.
func (r *ring) values() []float64 {
	out := make([]float64, 0, r.n)
	start := (r.next - r.n + HistoryLen) % HistoryLen
	for i := range r.n {
		out = append(out, r.buf[(start+i)%HistoryLen])
	}
	return out
}
