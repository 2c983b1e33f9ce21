package sdnotify

import "time"

// SetSendTimeout shortens the send timeout for a test and returns a
// function restoring it.
func SetSendTimeout(d time.Duration) func() {
	old := sendTimeout
	sendTimeout = d
	return func() { sendTimeout = old }
}
