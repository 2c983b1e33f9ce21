package promlimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/seed-a07d1050/portcullis/internal/waitfor"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/promlimit"
)

func newLimiter(t *testing.T, cfg limit.Config[string]) *limit.Limiter[string] {
	t.Helper()
	cfg.ReclaimAfter = -1
	l, err := limit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// gather registers cs in a fresh pedantic registry and returns the families by name.
func gather(t *testing.T, cs ...prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			t.Fatalf("register: %v", err)
		}
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	byName := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	return byName
}

func value(t *testing.T, fams map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok || len(f.GetMetric()) != 1 {
		t.Fatalf("metric %s missing or not single", name)
	}
	m := f.GetMetric()[0]
	switch f.GetType() {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	}
	t.Fatalf("metric %s has type %v", name, f.GetType())
	return 0
}

func TestCollectorReportsTotals(t *testing.T) {
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 1}})
	p, err := l.TryAcquire("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire("a"); err == nil {
		t.Fatal("second permit of a granted over a limit of 1")
	}
	c := promlimit.NewCollector(l, promlimit.Opts{Subsystem: "exchanges", ConstLabels: prometheus.Labels{"route": "api"}})

	fams := gather(t, c)
	if len(fams) != 11 {
		t.Fatalf("collector exports %d families, want 11", len(fams))
	}
	tests := []struct {
		name string
		want float64
		typ  dto.MetricType
	}{
		{"portcullis_exchanges_granted_total", 1, dto.MetricType_COUNTER},
		{"portcullis_exchanges_refused_total", 1, dto.MetricType_COUNTER},
		{"portcullis_exchanges_reclaimed_total", 0, dto.MetricType_COUNTER},
		{"portcullis_exchanges_in_use", 1, dto.MetricType_GAUGE},
		{"portcullis_exchanges_keys", 1, dto.MetricType_GAUGE},
		{"portcullis_exchanges_waiting", 0, dto.MetricType_GAUGE},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fams[tt.name].GetType(); got != tt.typ {
				t.Errorf("type %v, want %v", got, tt.typ)
			}
			if got := value(t, fams, tt.name); got != tt.want {
				t.Errorf("value %v, want %v", got, tt.want)
			}
			lbl := fams[tt.name].GetMetric()[0].GetLabel()
			if len(lbl) != 1 || lbl[0].GetName() != "route" || lbl[0].GetValue() != "api" {
				t.Errorf("labels %v, want only route=api", lbl)
			}
		})
	}
	p.Release()
	if got := value(t, gather(t, c), "portcullis_exchanges_in_use"); got != 0 {
		t.Fatalf("in_use after release = %v, want 0", got)
	}
}

func TestCollectorsWithDistinctLabelsShareARegistry(t *testing.T) {
	var cs []prometheus.Collector
	for _, route := range []string{"a", "b"} {
		l := newLimiter(t, limit.Config[string]{})
		opts := promlimit.Opts{ConstLabels: prometheus.Labels{"route": route}}
		cs = append(cs, promlimit.NewCollector(l, opts), promlimit.NewWaitHistogram(opts, nil))
	}
	fams := gather(t, cs...)
	if n := len(fams["portcullis_limit_granted_total"].GetMetric()); n != 2 {
		t.Fatalf("granted_total has %d series, want 2", n)
	}
}

func TestCollectorTotalsFunc(t *testing.T) {
	src := promlimit.TotalsFunc(func() limit.Totals { return limit.Totals{Reclaimed: 7} })
	if got := value(t, gather(t, promlimit.NewCollector(src, promlimit.Opts{})), "portcullis_limit_reclaimed_total"); got != 7 {
		t.Fatalf("reclaimed_total = %v, want 7", got)
	}
}

func TestWaitHistogramRecordsQueueWaitsOnly(t *testing.T) {
	w := promlimit.NewWaitHistogram(promlimit.Opts{}, []float64{0.01, 1})
	l := newLimiter(t, limit.Config[string]{
		Policy: limit.Policy[string]{
			Permits:      1,
			QueueSize:    4,
			QueueTimeout: 20 * time.Millisecond,
		},
		Observer: promlimit.ObserverFor[string](w),
	})
	first, err := l.TryAcquire("k") // no wait: not recorded
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(context.Background(), "k"); err == nil { // times out
		t.Fatal("queued acquire succeeded while the only permit was held")
	}
	ctx, cancel := context.WithCancel(context.Background())
	abandoned := make(chan error, 1)
	go func() { _, err := l.Acquire(ctx, "k"); abandoned <- err }()
	waitfor.Cond(t, "the acquire waiting", func() bool { return l.Totals().Waiting == 1 })
	cancel()
	if err := recv(t, abandoned); err == nil {
		t.Fatal("abandoned waiter was granted")
	}
	granted := make(chan error, 1)
	go func() {
		p, err := l.Acquire(context.Background(), "k")
		p.Release()
		granted <- err
	}()
	waitfor.Cond(t, "the acquire waiting", func() bool { return l.Totals().Waiting == 1 })
	first.Release()
	if err := recv(t, granted); err != nil {
		t.Fatal(err)
	}

	fam := gather(t, w)["portcullis_limit_queue_wait_seconds"]
	want := map[string]uint64{promlimit.OutcomeGranted: 1, promlimit.OutcomeTimeout: 1, promlimit.OutcomeAbandoned: 1}
	if len(fam.GetMetric()) != len(want) {
		t.Fatalf("histogram has %d series, want %d", len(fam.GetMetric()), len(want))
	}
	for _, m := range fam.GetMetric() {
		outcome := m.GetLabel()[0].GetValue()
		if got := m.GetHistogram().GetSampleCount(); got != want[outcome] {
			t.Errorf("outcome %s: %d samples, want %d", outcome, got, want[outcome])
		}
	}
}

func TestObserversSkipsNil(t *testing.T) {
	if promlimit.Observers[string](nil, nil) != nil {
		t.Fatal("Observers of only nils is not nil")
	}
	var calls int
	count := limit.ObserverFunc[string](func(limit.Event[string]) { calls++ })
	promlimit.Observers[string](nil, count, count).Observe(limit.Event[string]{Kind: limit.Granted})
	if calls != 2 {
		t.Fatalf("combined observer called %d observers, want 2", calls)
	}
}

func recv(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("no answer within 5s")
		return nil
	}
}
