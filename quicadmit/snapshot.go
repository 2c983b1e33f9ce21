package quicadmit

import "sync/atomic"

// A Snapshot is the state of a [Controller] at one moment. The counters
// only grow. Each field is read atomically, the whole not: under load the
// identity Admitted = Completed + Failed + TimedOut + Abandoned +
// InProgress may be off by the attempts that moved while it was taken, and
// holds exactly when the Controller is idle.
type Snapshot struct {
	// Admitted counts attempts admitted by ConnContext (counted in
	// progress).
	Admitted uint64
	// Retried counts the times VerifySourceAddress asked quic-go for a
	// Retry. It counts decisions, one per Initial packet that would open a
	// connection, not clients: a first flight may span two Initials (a
	// post-quantum key share does not fit one), a client repeats its
	// Initial when the answer is lost, and quic-go drops a Retry when its
	// send queue is full.
	Retried uint64
	// Refused counts refusals with CONNECTION_REFUSED because
	// MaxInProgress were in progress, the Controller was closed, or a
	// chained ConnContext failed. Like Retried it counts Initial packets.
	Refused uint64
	// PerClientRefused counts connections refused by the per-client cap:
	// proven attempts refused with CONNECTION_REFUSED, and completed
	// connections closed with Config.PerClientCloseCode (these also count
	// in Completed).
	PerClientRefused uint64
	// PerClientRateRefused counts connections refused by
	// Config.PerClientRate, the same two ways as PerClientRefused.
	PerClientRateRefused uint64
	// Completed counts attempts whose handshake completed.
	Completed uint64
	// Failed counts attempts whose handshake failed: a TLS error on either
	// side, a protocol violation, or another error quic-go reported.
	Failed uint64
	// TimedOut counts attempts that hit quic-go's handshake or idle
	// timeout, or the Controller's backstop.
	TimedOut uint64
	// Abandoned counts attempts given up on purpose before completion:
	// the peer closed the connection, the listener or transport closed, or
	// quic-go's accept queue was full.
	Abandoned uint64

	// InProgress is the number of attempts in progress now.
	InProgress int64
	// Threshold is the retry threshold as last computed.
	Threshold int64
	// CompletionRate is the smoothed number of handshakes completed per
	// second as of the last full second. The threshold follows it, or the
	// current second's count once that is higher.
	CompletionRate int64
	// MaxInProgress is the configured maximum of attempts in progress.
	MaxInProgress int64
	// RetryOn reports whether attempts without a valid token are being
	// sent a Retry.
	RetryOn bool
}

// Snapshot returns the Controller's counters and state.
func (c *Controller) Snapshot() Snapshot {
	s := c.counts.snapshot()
	s.InProgress = c.inProgress.Load()
	s.Threshold = c.threshold.Load()
	s.CompletionRate = c.rate.smoothed.Load()
	s.MaxInProgress = c.s.maxInProgress
	s.RetryOn = c.gate.on.Load()
	return s
}

// counters are the Controller's monotonic counts.
type counters struct {
	admitted, retried, refused, perClientRefused atomic.Uint64
	perClientRateRefused                         atomic.Uint64
	completed, failed, timedOut, abandoned       atomic.Uint64
}

func (c *counters) ended(o outcome) {
	switch o {
	case outcomeCompleted:
		c.completed.Add(1)
	case outcomeFailed:
		c.failed.Add(1)
	case outcomeTimedOut:
		c.timedOut.Add(1)
	default:
		c.abandoned.Add(1)
	}
}

func (c *counters) snapshot() Snapshot {
	return Snapshot{
		Admitted:             c.admitted.Load(),
		Retried:              c.retried.Load(),
		Refused:              c.refused.Load(),
		PerClientRefused:     c.perClientRefused.Load(),
		PerClientRateRefused: c.perClientRateRefused.Load(),
		Completed:            c.completed.Load(),
		Failed:               c.failed.Load(),
		TimedOut:             c.timedOut.Load(),
		Abandoned:            c.abandoned.Load(),
	}
}
