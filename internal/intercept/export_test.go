package intercept

import "time"

// SetLeavesClock makes l read the time from now, so that tests move time
// on without sleeping.
func SetLeavesClock(l *Leaves, now func() time.Time) { l.now = now }

// SetCertLogClock makes u's once-per-host-per-minute log gate read the
// time from now.
func SetCertLogClock(u *Upstream, now func() time.Time) { u.certLog.now = now }
