package config

import (
	"github.com/seed-a07d1050/portcullis/internal/ratetext"
)

// Rates are read by package ratetext, the parser package rate uses too, so
// that config reads "10r/s burst=20" exactly as the library does without
// importing the limiter.

// A RateValue is a number of requests per period as the configuration writes it: "10r/s",
// "600r/m", "30r/h" or "unlimited". The zero RateValue is unset, and invalid where a rate is
// required; [UnlimitedRate] limits nothing. RateValues are comparable.
type RateValue = ratetext.Rate

// A RateLimit is one key value's rate limit as an override writes it, in nginx limit_req's
// words: "100r/s burst=50", "10r/s burst=20 delay=5", "10r/s burst=20 nodelay",
// "unlimited". The zero RateLimit has no rate and is invalid.
type RateLimit = ratetext.Limit

// UnlimitedRate is the RateValue written "unlimited": every request is admitted at once.
var UnlimitedRate = ratetext.Unlimited

// RateNoDelay, as [RateLimit.Delay], lets the whole burst through at once: nginx's nodelay.
const RateNoDelay = ratetext.NoDelay

// PerSecondRate returns n requests per second.
func PerSecondRate(n int) RateValue { return ratetext.PerSecond(n) }

// ParseRateValue reads a rate as nginx's limit_req_zone writes it (see ratetext.ParseRate).
// Its errors say what is wrong without quoting the input.
func ParseRateValue(s string) (RateValue, error) { return ratetext.ParseRate(s) }

// ParseRateLimit reads an override (see ratetext.ParseLimit). Its errors say what is wrong
// without quoting the input.
func ParseRateLimit(s string) (RateLimit, error) { return ratetext.ParseLimit(s) }
