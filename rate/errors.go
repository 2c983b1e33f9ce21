package rate

import "github.com/seed-a07d1050/portcullis/limit"

// ErrLimited is returned by [Limiter.Reserve] and [Limiter.Wait] for a
// request over its key's rate and burst. It matches limit.ErrLimited under
// [errors.Is], so that code branching on that for concurrency limits
// treats rate refusals alike.
var ErrLimited error = limited{}

type limited struct{}

func (limited) Error() string        { return "rate: over the rate limit" }
func (limited) Is(target error) bool { return target == limit.ErrLimited }

// ErrStore means the shared Store could not decide and its failure policy
// refuses. The returned error also wraps the Store's error. It matches
// limit.ErrStore under errors.Is.
var ErrStore error = storeFailed{}

type storeFailed struct{}

func (storeFailed) Error() string        { return "rate: shared store failed" }
func (storeFailed) Is(target error) bool { return target == limit.ErrStore }
