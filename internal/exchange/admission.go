package exchange

import (
	"net/http"
	"net/netip"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/accesslog"
	"github.com/seed-a07d1050/portcullis/limit"
)

// MaxKeys is how many distinct limit keys an access line names: a client
// limit, a shadow limit and a route limit.
const MaxKeys = 3

// Admission is what the route and the limits decided about one exchange,
// for its access line and its metrics. It is written and read on the
// exchange's goroutine only: the limits decide before the handler runs,
// the relay records the upstream on the same goroutine, and the line is
// written after the handler returned; so it needs no atomics, and nothing
// in it is allocated per exchange (its strings are the route's name, the
// limits' keys, and constants).
type Admission struct {
	Metrics *RouteMetrics // the route's; the listener's when no route took the request
	Route   string        // the route that took the request; "" when none
	outcome accesslog.Outcome
	by      string        // the limit that refused the request or that it went over
	reason  string        // why it was refused (see refusalReason); "" otherwise
	waited  time.Duration // in limit queues, summed
	// Upstream is the time from sending the request upstream to its
	// response head; zero when no upstream answered.
	Upstream time.Duration
	// Client is the access line's client when the path that served the
	// exchange knew it already (a loop's connection whose peer is the
	// client of all its requests); invalid: found from the request.
	Client netip.Addr
	keys   [MaxKeys]string // the distinct keys the limits counted, in order
	nkeys  uint8
	// RateDry is what a rate in dry-run mode would have done to the
	// request, enforcing: rateDryDelayed or rateDryRejected (nginx's
	// DELAYED_DRY_RUN and REJECTED_DRY_RUN); zero when no dry-run rate
	// was over.
	RateDry  uint8
	gatePend bool // a gate (a rate, authentication) is deciding; see gated
	// Left: the client went away while its request waited (in a rate's
	// delay, a limit's queue, or on the upstream), before any answer was
	// written; the exchange ends as nginx's 499 (see statusClientClosed).
	Left bool
	// RequestID is the request's id (config.RequestID), sent upstream and
	// written in the access line; "" when the listener names none.
	RequestID string
}

// addKey records key, once.
func (a *Admission) addKey(key string) {
	for i := range a.nkeys {
		if a.keys[i] == key {
			return
		}
	}
	if int(a.nkeys) < MaxKeys {
		a.keys[a.nkeys] = key
		a.nkeys++
	}
}

// Admit records that the limit by let the request through.
func (a *Admission) Admit(by, key string, waited time.Duration, shadowed bool) {
	a.addKey(key)
	if waited > 0 {
		a.waited += waited
		if a.outcome < accesslog.Queued {
			a.outcome = accesslog.Queued
		}
	}
	if shadowed && a.outcome < accesslog.ShadowOver {
		a.outcome, a.by = accesslog.ShadowOver, by
	}
}

// refuse records that the limit by refused the request, for reason.
func (a *Admission) refuse(by, key, reason string) {
	if key != "" {
		a.addKey(key)
	}
	a.outcome, a.by, a.reason = accesslog.Refused, by, reason
}

// StateOf returns the state of the exchange w belongs to, or nil when w is
// not an exchange's writer (a handler used outside an HTTP listener's
// chain). It looks through writers that unwrap, as httplimit's tunnel
// writer does.
func StateOf(w http.ResponseWriter) *State {
	for range 8 {
		switch x := w.(type) {
		case *Writer:
			return &x.State
		case *hijackableWriter:
			return &x.State
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
	return nil
}

// refusalReason names why a limit refused a request, for the access log:
// limit_full (the key, or the limit as a whole, at its permits),
// queue_full, queue_timeout, store_failed (the cluster's Redis could not
// decide), closed (the limit was retired while the request waited) or
// abandoned (the client left while it waited).
func refusalReason(err error) string {
	switch k := limit.RefusalKind(err); k {
	case limit.Refused:
		return "limit_full"
	case 0:
		return "closed"
	default:
		return k.String()
	}
}

// The values of Admission.RateDry, and the rate_dry_run field's words.
const (
	RateDryDelayed  uint8 = 1
	RateDryRejected uint8 = 2
)

var rateDryNames = [...]string{"", "delayed", "rejected"}

// ReasonRate is the refusal reason of a request rate.
const ReasonRate = "rate"

// ByRate names a request rate among what admitted a request (State.Admit):
// the access line's slot of the rate.
const ByRate = "rate"

// reasonQueueTimeout is the refusal reason of a request that waited a
// limit queue's timeout.
var reasonQueueTimeout = limit.QueueTimeout.String()

// ReasonAbandoned is the refusal reason of a request whose client went
// away while it waited, as limit.RefusalKind names it.
var ReasonAbandoned = limit.Abandoned.String()

// StatusClientClosed is the status an exchange is logged and counted with
// when its client went away while its request waited, before any answer
// was written: nginx's 499 (Client Closed Request). It is no server error,
// so it stays out of the 5xx class: the requests metric counts it under
// code "499", apart from the 4xx class too.
const StatusClientClosed = 499

// ClientLeft reports whether r's context ended, which, but while the
// daemon stops or a limit's reclaim cuts the exchange (see EndedAt),
// is its client going away: the connection closed, the stream reset.
func ClientLeft(r *http.Request) bool { return r.Context().Err() != nil }

// Gated returns wrap(next) for a gate that either lets a request through
// to next or answers it itself (a rate, authentication), recording in the
// exchange's state a refusal by the gate named by when next was not
// reached: the mark set before the gate decides is cleared by next, and
// cleared again once recorded, so that nested gates each see their own.
// refusal returns the key and reason of a refused request.
func Gated(by string, refusal func(st *State, r *http.Request) (key, reason string),
	wrap func(http.Handler) http.Handler, next http.Handler) http.Handler {
	inner := wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if st := StateOf(w); st != nil {
			st.gatePend = false
		}
		next.ServeHTTP(w, r)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := StateOf(w)
		if st == nil {
			inner.ServeHTTP(w, r)
			return
		}
		st.gatePend = true
		inner.ServeHTTP(w, r)
		if st.gatePend {
			st.gatePend = false
			key, reason := refusal(st, r)
			st.refuse(by, key, reason)
		}
	})
}

// AuthRefusal names why authentication answered a request itself:
// unauthorized (401, 407: no or wrong credentials), auth_failures (429:
// the client's failed attempts are over their budget) or auth_busy (503:
// too many checks at once, or the check timed out).
func AuthRefusal(st *State, _ *http.Request) (string, string) {
	switch st.Status.Load() {
	case http.StatusTooManyRequests:
		return "", "auth_failures"
	case http.StatusServiceUnavailable:
		return "", "auth_busy"
	}
	return "", "unauthorized"
}

// AdmissionHooks returns the httplimit OnAdmit and Reject functions of a
// limit named by (a limit slot's label) whose queue times out after queueTimeout: each
// records the decision in the exchange's state, then reject (never nil)
// writes the refusal. A request refused for queue_timeout waited the
// queue's timeout, which the limiter's timer measured: it is added to the
// time the request was queued, so that its access line says how long.
func AdmissionHooks(by string, queueTimeout time.Duration, reject func(http.ResponseWriter, *http.Request, string, error)) (
	func(http.ResponseWriter, *http.Request, string, time.Duration, bool),
	func(http.ResponseWriter, *http.Request, string, error),
) {
	onAdmit := func(w http.ResponseWriter, _ *http.Request, key string, waited time.Duration, shadowed bool) {
		if st := StateOf(w); st != nil {
			st.Admit(by, key, waited, shadowed)
		}
	}
	onRefuse := func(w http.ResponseWriter, r *http.Request, key string, err error) {
		if st := StateOf(w); st != nil {
			reason := refusalReason(err)
			st.refuse(by, key, reason)
			st.Left = reason == ReasonAbandoned && ClientLeft(r)
			if reason == reasonQueueTimeout {
				st.waited += queueTimeout
			}
		}
		reject(w, r, key, err)
	}
	return onAdmit, onRefuse
}

// ForwardRefused is the forward proxy's OnRefuse: a request it refuses
// itself (a destination its policy denies, a malformed target, a loop) is
// logged as refused by "forward", with the proxy's reason.
func ForwardRefused(w http.ResponseWriter, _ *http.Request, _ int, reason string) {
	if st := StateOf(w); st != nil {
		st.refuse("forward", "", reason)
	}
}
