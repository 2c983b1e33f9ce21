package grpclimit

import (
	"context"
	"fmt"
	"testing"

	"github.com/seed-a07d1050/portcullis/limit"
)

// A refusal line names its reason as the limiter's metrics do, and as
// httplimit's lines do.
func TestRefusalReasonNames(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{limit.ErrLimited, "refused"},
		{limit.ErrGlobalLimited, "refused"},
		{limit.ErrQueueFull, "queue_full"},
		{limit.ErrQueueTimeout, "queue_timeout"},
		{fmt.Errorf("%w: %w", limit.ErrStore, context.DeadlineExceeded), "store_failed"},
		{ErrShadowRefused, "shadow_refused"},
		{limit.ErrClosed, "closed"},
		{context.Canceled, "abandoned"},
	} {
		if got := refusalReason(tc.err); got != tc.want {
			t.Errorf("refusalReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
