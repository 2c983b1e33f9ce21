package relay

import "testing"

func TestAppendRequestID(t *testing.T) {
	head := []byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	got := string(AppendRequestID(head, "X-Request-Id", "r1"))
	if want := "GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: r1\r\n\r\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
