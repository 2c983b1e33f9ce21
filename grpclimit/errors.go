package grpclimit

import "errors"

// ErrShadowRefused is what [Config.OnReject] receives, in shadow mode, for
// a call the limit would have refused and that was let through. It does
// not match limit.ErrLimited under [errors.Is], so that code counting real
// refusals does not count it.
var ErrShadowRefused = errors.New("grpclimit: over the limit (shadow mode, let through)")
