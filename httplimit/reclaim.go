package httplimit

import (
	"net/http"
	"time"

	"github.com/seed-a07d1050/portcullis/limit"
)

// aLongTimeAgo is a deadline in the past: setting it makes blocked I/O
// return at once.
var aLongTimeAgo = time.Unix(1, 0)

// endOnReclaim arranges for the exchange answered through w to end if one
// of permits is reclaimed: a reclaimed permit is free for another request,
// and an exchange running on would take its key over the limit. The reclaim
// sets the response's read and write deadlines in the past: a handler
// blocked writing to a client that stopped reading, or reading a body the
// client stopped sending, gets an error at once. On HTTP/1.1 and HTTP/2 the
// server then also cancels the request's context (the connection's read
// fails, or the stream is reset), which ends a handler waiting on its own
// work, such as a proxy waiting on its upstream. On other servers a handler
// that neither reads nor writes notices at its next read or write. Nothing
// is arranged without reclaim (a negative ReclaimAfter).
func (l *Limiter) endOnReclaim(w http.ResponseWriter, permits ...limit.Permit[string]) {
	end := l.reclaimEnd(w)
	if end == nil {
		return
	}
	for _, p := range permits {
		p.OnReclaim(end)
	}
}

// reclaimEnd returns what ends the exchange answered through w when its
// permit is reclaimed (see endOnReclaim), or nil without reclaim.
func (l *Limiter) reclaimEnd(w http.ResponseWriter) func() {
	if l.s.ReclaimAfter < 0 {
		return nil
	}
	return func() {
		rc := http.NewResponseController(w)
		_ = rc.SetWriteDeadline(aLongTimeAgo)
		_ = rc.SetReadDeadline(aLongTimeAgo)
	}
}
