package livepage

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"
)

// benchSource is a daemon of 4 listeners with 5 limits each and 10 busy
// keys, 4 kinds of upstream errors and 2 shadow limits.
type benchSource struct{ n uint64 }

func (b *benchSource) LiveState(context.Context) State {
	b.n += 7
	st := State{Time: time.Now()}
	for i := range 4 {
		l := Listener{Row: Row{ID: fmt.Sprint("l", i), Name: "listener", Limit: "64 connections per client", Refused: b.n}}
		for j := range 5 {
			l.Limits = append(l.Limits, Row{ID: fmt.Sprint(l.ID, "/", j), Name: "route", Limit: "4 per client_ip", InUse: j, Refused: b.n})
		}
		l.Requests = &Requests{Total: 6 * b.n}
		for _, c := range StatusClasses {
			l.Requests.Classes = append(l.Requests.Classes, Count{Name: c, Count: b.n})
		}
		st.Listeners = append(st.Listeners, l)
		st.Upstream = append(st.Upstream, UpstreamErrors{ID: l.ID + "/r/timeout", Listener: l.ID, Route: "r", Kind: "timeout", Count: b.n})
	}
	for i := range 2 {
		st.Shadow = append(st.Shadow, Shadow{ID: fmt.Sprint("l0/", i, "/shadow"), Name: "route shadow_limit", Limit: "2 per client_ip", WouldRefuse: b.n})
	}
	for i := range 10 {
		st.Keys = append(st.Keys, Key{Where: "l0 connections", Key: fmt.Sprint("192.0.2.", i), InUse: 16})
	}
	return st
}

// One sample with a full history: what the Sampler spends each second
// besides asking the daemon (rates, the frame, its JSON).
func BenchmarkSample(b *testing.B) {
	s := &Sampler{src: &benchSource{}, ctx: context.Background(), next: make(chan struct{})}
	s.sample(sampleFirst)
	for range HistoryLen {
		s.sample(sampleTick)
	}
	b.ReportAllocs()
	for b.Loop() {
		s.sample(sampleTick)
	}
	b.ReportMetric(float64(len(s.json)), "frame-bytes")
}

// Rendering the page with a full history.
func BenchmarkPage(b *testing.B) {
	s := &Sampler{src: &benchSource{}, ctx: context.Background(), next: make(chan struct{})}
	s.sample(sampleFirst)
	for range HistoryLen {
		s.sample(sampleTick)
	}
	h := Page(s, slog.New(slog.DiscardHandler))
	req := httptest.NewRequest("GET", PagePath, nil)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		_, _ = io.Copy(io.Discard, w.Body)
	}
}
