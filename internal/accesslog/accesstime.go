package accesslog

import (
	"sync/atomic"
	"time"
)

// A stampCache writes the time of access lines as time.Time.AppendFormat
// writes it in one of the two layouts of slog's handlers, keeping the text
// of the last whole second it wrote: the lines of one second differ only
// in the fraction, and working out the date and the zone's offset is most
// of what AppendFormat costs. Many connections' goroutines write lines at
// once, so the second is an immutable value behind an atomic pointer; a
// goroutine that misses replaces it.
type stampCache struct {
	// nano selects time.RFC3339Nano's fraction (JSON): up to nine digits,
	// trailing zeros and a zero fraction dropped. Otherwise the text
	// layout's ".000": three digits, truncated.
	nano bool
	last atomic.Pointer[stampSecond]
}

// stampSecond is the text of one second in one location. A Location's
// offset at a given instant never changes, so the pair is the key.
type stampSecond struct {
	unix int64
	loc  *time.Location
	head string // to the seconds: "2006-01-02T15:04:05"
	zone string // "Z07:00"
}

var (
	textStamps = stampCache{}           // "2006-01-02T15:04:05.000Z07:00"
	jsonStamps = stampCache{nano: true} // time.RFC3339Nano
)

// append appends t, with its monotonic reading already stripped, in c's
// layout.
func (c *stampCache) append(b []byte, t time.Time) []byte {
	unix, loc := t.Unix(), t.Location()
	s := c.last.Load()
	if s == nil || s.unix != unix || s.loc != loc {
		s = &stampSecond{unix: unix, loc: loc, head: t.Format("2006-01-02T15:04:05"), zone: t.Format("Z07:00")}
		c.last.Store(s)
	}
	b = append(b, s.head...)
	if c.nano {
		b = appendNanos(b, t.Nanosecond())
	} else {
		ms := t.Nanosecond() / 1e6
		b = append(b, '.', byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10))
	}
	return append(b, s.zone...)
}

// appendNanos appends the fraction of a second of ns nanoseconds as
// RFC3339Nano writes it.
func appendNanos(b []byte, ns int) []byte {
	if ns == 0 {
		return b
	}
	var d [10]byte
	d[0] = '.'
	for i := 9; i > 0; i-- {
		d[i] = byte('0' + ns%10)
		ns /= 10
	}
	n := len(d)
	for d[n-1] == '0' {
		n--
	}
	return append(b, d[:n]...)
}
