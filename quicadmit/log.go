package quicadmit

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

// logInterval is the least time between two logs of one kind, so that a
// flood cannot flood the log (the hooks run on quic-go's packet goroutine,
// and a slow log handler would stall it).
const logInterval = time.Second

// throttle lets one event through per logInterval.
type throttle struct{ next atomic.Int64 }

func (t *throttle) allow(now int64) bool {
	next := t.next.Load()
	return now >= next && t.next.CompareAndSwap(next, now+int64(logInterval))
}

type logThrottles struct{ refused, perClient, perClientRate, retry throttle }

// refuse counts a refusal by ConnContext and logs it, throttled.
func (c *Controller) refuse(reason error, info *quic.ClientInfo) {
	total := c.counts.refused.Add(1)
	if !c.logs.refused.allow(c.clock.Now().UnixNano()) {
		return
	}
	msg := "quicadmit: refusing QUIC connection attempts: too many in progress"
	if errors.Is(reason, ErrClosed) {
		msg = "quicadmit: refusing QUIC connection attempts: controller closed"
	}
	c.s.logger.Log(context.Background(), c.s.logLevel, msg,
		"remote", addrString(info.RemoteAddr), "in_progress", c.inProgress.Load(),
		"max_in_progress", c.s.maxInProgress, "refused_total", total)
}

// addrString formats a for a log line: as text, never as the struct a JSON
// handler would make of a *net.UDPAddr.
func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// refusePerClient counts a per-client refusal and logs it, throttled.
func (c *Controller) refusePerClient(key clientkey.Key) {
	total := c.counts.perClientRefused.Add(1)
	if !c.logs.perClient.allow(c.clock.Now().UnixNano()) {
		return
	}
	c.s.logger.Log(context.Background(), c.s.logLevel,
		"quicadmit: refusing QUIC connection: client over its connection limit",
		"client", key, "per_client_refused_total", total)
}

// refusePerClientRate counts a refusal by the per-client handshake rate
// and logs it, throttled.
func (c *Controller) refusePerClientRate(key clientkey.Key, retry time.Duration) {
	total := c.counts.perClientRateRefused.Add(1)
	if !c.logs.perClientRate.allow(c.clock.Now().UnixNano()) {
		return
	}
	c.s.logger.Log(context.Background(), c.s.logLevel,
		"quicadmit: refusing QUIC connection: client over its handshake rate",
		"client", key, "retry_after", retry, "per_client_rate_refused_total", total)
}

// logRetryChange logs Retry turning on or off, throttled.
func (c *Controller) logRetryChange(on bool, n, t int64) {
	if !c.logs.retry.allow(c.clock.Now().UnixNano()) {
		return
	}
	msg := "quicadmit: Retry off"
	if on {
		msg = "quicadmit: Retry on: validating client addresses"
	}
	c.s.logger.Log(context.Background(), c.s.logLevel, msg,
		"in_progress", n, "threshold", t, "retried_total", c.counts.retried.Load())
}
