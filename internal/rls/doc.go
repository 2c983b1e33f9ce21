// Package rls is Envoy's global rate limit service on Portcullis's
// counting: it answers envoy.service.ratelimit.v3.RateLimitService's
// ShouldRateLimit, as envoyproxy/ratelimit does, from rule files in that
// service's own YAML format, and decides each descriptor with the GCRA of
// package rate (nginx limit_req's rate, burst and delay) instead of fixed
// windows: locally (one rate.Limiter for every rule) or across a cluster
// on Redis (limit/redisstore's RateStore, one round trip per request).
//
// A request is decided all or nothing: when one enforced descriptor is
// over its limit, none of the others counts it. See docs/envoy.md for the
// format, what maps one to one from envoyproxy/ratelimit, and what does not.
package rls
