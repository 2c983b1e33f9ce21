package promlimit_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/promlimit"
)

// A limiter with its totals and its queue-wait histogram in one registry,
// labelled by route.
func Example() {
	opts := promlimit.Opts{Subsystem: "exchanges", ConstLabels: prometheus.Labels{"route": "api"}}
	wait := promlimit.NewWaitHistogram(opts, nil)
	lim, err := limit.New(limit.Config[string]{
		Policy: limit.Policy[string]{
			Permits:   8,
			QueueSize: 16,
		},
		Observer: promlimit.ObserverFor[string](wait),
	})
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(promlimit.NewCollector(lim, opts), wait)

	p, _ := lim.TryAcquire("192.0.2.7")
	defer p.Release()
	fams, _ := reg.Gather()
	for _, f := range fams {
		if f.GetName() == "portcullis_exchanges_in_use" {
			m := f.GetMetric()[0]
			fmt.Println(f.GetName(), m.GetLabel()[0].GetName(), m.GetLabel()[0].GetValue(), m.GetGauge().GetValue())
		}
	}
	// Output: portcullis_exchanges_in_use route api 1
}
