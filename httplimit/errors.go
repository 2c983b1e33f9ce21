package httplimit

import "errors"

// ErrShadowRefused is what [Config.OnReject] receives, in shadow mode, for a
// request the limit would have refused and that was let through. It does
// not match limit.ErrLimited under [errors.Is], so that code counting real
// refusals does not count it.
var ErrShadowRefused = errors.New("httplimit: over the limit (shadow mode, let through)")

// ErrShadowDelayed is what [RateConfig.OnReject] receives, in shadow mode,
// for a request the rate would have delayed and that went through at
// once. Like ErrShadowRefused it does not match limit.ErrLimited.
var ErrShadowDelayed = errors.New("httplimit: over the rate (shadow mode, not delayed)")
