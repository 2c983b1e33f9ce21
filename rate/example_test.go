package rate_test

import (
	"fmt"
	"time"

	"github.com/seed-a07d1050/portcullis/limit/limittest"
	"github.com/seed-a07d1050/portcullis/rate"
)

// The worked example of docs/ratelimit.md: 10r/s, burst 5, eight requests
// at once, in each delay mode; then a ninth 50 ms later.
func Example_delayModes() {
	for _, mode := range []struct {
		name  string
		delay int
	}{{"nodelay", rate.NoDelay}, {"delay=2", 2}, {"default", 0}} {
		clock := limittest.NewClock()
		l, _ := rate.New(rate.Config[string]{Rate: rate.PerSecond(10), Burst: 5, Delay: mode.delay, Clock: clock})
		fmt.Printf("%-8s", mode.name)
		for range 8 {
			d := l.Allow("client")
			switch d.Verdict {
			case rate.Admitted:
				fmt.Print(" now")
			case rate.Delayed:
				fmt.Print(" ", d.Delay)
			case rate.Refused:
				fmt.Print(" refused")
			}
		}
		clock.Advance(50 * time.Millisecond)
		d := l.Allow("client")
		fmt.Printf(" | at 50ms: %v, retry after %v\n", d.Verdict, d.RetryAfter)
		l.Close()
	}
	// Output:
	// nodelay  now now now now now now refused refused | at 50ms: refused, retry after 50ms
	// delay=2  now now now 100ms 200ms 300ms refused refused | at 50ms: refused, retry after 50ms
	// default  now 100ms 200ms 300ms 400ms 500ms refused refused | at 50ms: refused, retry after 50ms
}

func ExampleParseRate() {
	r, err := rate.ParseRate("600r/m")
	fmt.Println(r, r.Interval(), err)
	_, err = rate.ParseRate("10 r/s")
	fmt.Println(err)
	// Output:
	// 600r/m 100ms <nil>
	// rate: "10 r/s": the number of requests must be a positive decimal integer, with no spaces or signs
}
