package grpclimit_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/seed-a07d1050/portcullis/grpclimit"
	"github.com/seed-a07d1050/portcullis/promlimit"
)

// promlimit reads a Limiter as it reads any limiter, and the stream
// refusals of the tap handle show as queue-full refusals.
func TestMetrics(t *testing.T) {
	wait := promlimit.NewWaitHistogram(promlimit.Opts{Subsystem: "grpc_calls"}, nil)
	l := newLimiter(t, grpclimit.Config{Policy: grpclimit.Policy{Permits: 1, QueueSize: 1}, Observer: promlimit.ObserverFor[string](wait)})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promlimit.NewCollector(l, promlimit.Opts{Subsystem: "grpc_calls", ConstLabels: prometheus.Labels{"limiter": "test"}}), wait)

	svc := newService()
	addr := serve(t, svc, nil, grpclimit.ServerOptions(l)...)
	cc := dialFrom(t, "127.0.0.2", addr)
	running := startUnary(callCtx(t), cc, "")
	waitFor(t, "one call running", func() bool { return inUse(l) == 1 })
	waiter := startUnary(callCtx(t), cc, "")
	waitFor(t, "one waiter", func() bool { return l.Totals().Waiting == 1 })
	wantCode(t, result(t, startUnary(callCtx(t), cc, "")), codes.ResourceExhausted)

	for name, want := range map[string]float64{
		"portcullis_grpc_calls_in_use":           1,
		"portcullis_grpc_calls_waiting":          1,
		"portcullis_grpc_calls_queue_full_total": 1,
		"portcullis_grpc_calls_granted_total":    1,
	} {
		if got := gatherOne(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	svc.open()
	for _, c := range []<-chan error{running, waiter} {
		if err := result(t, c); err != nil {
			t.Fatal(err)
		}
	}
	waitIdle(t, l)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	waited := uint64(0)
	for _, f := range fams {
		if f.GetName() != "portcullis_grpc_calls_queue_wait_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == promlimit.OutcomeGranted {
				waited = m.GetHistogram().GetSampleCount()
			}
		}
	}
	if waited != 1 {
		t.Fatalf("%d granted waits recorded, want 1", waited)
	}
}

// gatherOne returns the value of the one series of the metric name.
func gatherOne(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		m := f.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}
