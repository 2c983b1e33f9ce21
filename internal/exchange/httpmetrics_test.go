package exchange

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	uptransport "github.com/seed-a07d1050/portcullis/internal/upstream"
)

// The duration histograms are native histograms, with classic buckets
// beside them for scrapers that ask for the text format.
func TestDurationHistogramsAreNative(t *testing.T) {
	m := NewMetrics()
	reg := prometheus.NewRegistry()
	m.RegisterOn(reg)
	rm := m.Route("web", "r")
	rm.ended(200, 3*time.Millisecond)
	rm.Upstream.Observe(0.002)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, mf := range mfs {
		switch mf.GetName() {
		case "portcullis_http_request_duration_seconds", "portcullis_upstream_response_duration_seconds":
		default:
			continue
		}
		found++
		h := mf.GetMetric()[0].GetHistogram()
		if h.GetSchema() == 0 && len(h.GetPositiveSpan()) == 0 || h.GetSampleCount() != 1 {
			t.Errorf("%s: schema %d spans %v count %d, want a native histogram of 1 sample", mf.GetName(), h.GetSchema(), h.GetPositiveSpan(), h.GetSampleCount())
		}
		if len(h.GetBucket()) != len(durationBuckets) {
			t.Errorf("%s: %d classic buckets, want %d", mf.GetName(), len(h.GetBucket()), len(durationBuckets))
		}
	}
	if found != 2 {
		t.Fatalf("found %d of the 2 histograms", found)
	}
}

func TestClassifyUpstreamErr(t *testing.T) {
	dial := func(err error) error { return &net.OpError{Op: "dial", Net: "tcp", Err: err} }
	for _, tt := range []struct {
		err  error
		want UpstreamErrKind
	}{
		{dial(syscall.ECONNREFUSED), upErrRefused},
		{dial(syscall.EHOSTUNREACH), upErrConnect},
		{fmt.Errorf("send: %w", context.DeadlineExceeded), upErrTimeout},
		{uptransport.ErrHeadTimeout, upErrTimeout},
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, upErrReset},
		{io.ErrUnexpectedEOF, upErrReset},
		{uptransport.ErrHeadTooLarge, UpErrBadResponse},
		{errors.New("something else"), upErrOther},
	} {
		if got := ClassifyUpstreamErr(tt.err); got != tt.want {
			t.Errorf("%v: %s, want %s", tt.err, upErrNames[got], upErrNames[tt.want])
		}
	}
}
