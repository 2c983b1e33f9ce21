package accesslog

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// stampLayouts are the layouts of slog's handlers that the stamp caches
// stand for.
var stampLayouts = []struct {
	nano   bool
	layout string
}{
	{false, "2006-01-02T15:04:05.000Z07:00"},
	{true, time.RFC3339Nano},
}

// stampZones are UTC, the local zone, zones with odd offsets, and, where
// the system has them, zones with daylight saving time.
func stampZones(t testing.TB) []*time.Location {
	zones := []*time.Location{
		time.UTC, time.Local,
		time.FixedZone("", 5*3600+45*60), time.FixedZone("NST", -(3*3600 + 30*60)),
		time.FixedZone("", 5*3600+30*60), time.FixedZone("", -8*3600),
		time.FixedZone("LMT", 3600+7), time.FixedZone("", -59), time.FixedZone("UTC", 0),
	}
	for _, name := range []string{"Europe/Berlin", "America/St_Johns", "Australia/Lord_Howe"} {
		if loc, err := time.LoadLocation(name); err == nil {
			zones = append(zones, loc)
		} else {
			t.Logf("no zone %s: %v", name, err)
		}
	}
	return zones
}

// checkStamp compares what c writes for t, after the line's prefix, with
// AppendFormat.
func checkStamp(t testing.TB, c *stampCache, layout string, at time.Time) {
	t.Helper()
	want := "time=" + at.Format(layout)
	if got := string(c.append([]byte("time="), at)); got != want {
		t.Fatalf("%s (nano %v) at %d.%09d in %v:\ngot  %q\nwant %q", layout, c.nano, at.Unix(), at.Nanosecond(), at.Location(), got, want)
	}
}

// TestAccessTimeMatchesAppendFormat compares the stamp caches with
// time.Time.AppendFormat for instants that hit and miss the cached second:
// each second in every zone in turn (one second, many locations), then
// fractions within it, then across the boundary to the next second.
func TestAccessTimeMatchesAppendFormat(t *testing.T) {
	zones := stampZones(t)
	nanos := []int{0, 1, 10, 999, 1000, 1e6 - 1, 1e6, 100000000, 120000000, 123000000, 123456789, 500000001, 999000000, 999999999}
	rng := rand.New(rand.NewPCG(7, 7))
	secs := []int64{0, -1, 1, 1798883179, 1774746000, 1792890000, 253402300799, -62135596800}
	for range 300 {
		secs = append(secs, rng.Int64N(253402300800+62135596800)-62135596800) // years 1 to 9999
	}
	for _, l := range stampLayouts {
		c := &stampCache{nano: l.nano}
		for _, sec := range secs {
			for _, ns := range append(nanos, rng.IntN(1e9)) {
				for _, loc := range zones {
					checkStamp(t, c, l.layout, time.Unix(sec, int64(ns)).In(loc))
				}
			}
			for _, loc := range zones {
				at := time.Unix(sec, 999999999).In(loc)
				checkStamp(t, c, l.layout, at)
				checkStamp(t, c, l.layout, at.Add(time.Nanosecond))
				checkStamp(t, c, l.layout, at)
			}
		}
	}
}

// TestAccessTimeConcurrent formats instants around a few seconds, in a few
// zones, from many goroutines at once: under the race detector it checks
// the cache's sharing, and each result against AppendFormat.
func TestAccessTimeConcurrent(t *testing.T) {
	zones := stampZones(t)[:4]
	base := time.Date(2026, 12, 2, 9, 46, 19, 0, time.UTC)
	for _, l := range stampLayouts {
		c := &stampCache{nano: l.nano}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 1))
				for range 2000 {
					at := base.Add(time.Duration(rng.Int64N(int64(3 * time.Second))))
					checkStamp(t, c, l.layout, at.In(zones[rng.IntN(len(zones))]))
				}
			})
		}
		wg.Wait()
	}
}

// FuzzAccessTime compares the stamp caches with AppendFormat for any
// instant, in a zone of any offset, and for a second instant d after it
// (in the same cached second or not).
func FuzzAccessTime(f *testing.F) {
	f.Add(int64(1798883179), int64(0), 0, int64(1))
	f.Add(int64(1798883179), int64(120000000), 5*3600+45*60, int64(880000000))
	f.Add(int64(1798883179), int64(999999999), -(3*3600 + 30*60), int64(1))
	f.Add(int64(-1), int64(100000000), 59, int64(-100000001))
	f.Add(int64(253402300799), int64(1), -1, int64(1e9))
	f.Fuzz(func(t *testing.T, sec, ns int64, offset int, d int64) {
		// Within years 1 to 9999, where the layouts are RFC 3339; and
		// offsets under a day, as the time package's zone files have.
		sec = min(max(sec, -62135596800), 253402300799)
		loc := time.FixedZone("", offset%(24*3600))
		at := time.Unix(sec, ns).In(loc)
		for _, l := range stampLayouts {
			c := &stampCache{nano: l.nano}
			checkStamp(t, c, l.layout, at)
			checkStamp(t, c, l.layout, at.Add(time.Duration(d)))
			checkStamp(t, c, l.layout, at.In(time.UTC))
		}
	})
}
