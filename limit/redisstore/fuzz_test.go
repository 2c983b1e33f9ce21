package redisstore_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/seed-a07d1050/portcullis/limit/redisstore"
)

// FuzzClientAddr feeds NewClient arbitrary addresses (they come from the
// daemon's config file): it must never panic, and whatever it accepts must
// be host:port with a host and a port in 1..65535.
func FuzzClientAddr(f *testing.F) {
	for _, s := range []string{"127.0.0.1:6379", "[::1]:6380", "redis.internal:7000", ":6379", "h:0", "h:65536", "h", "[::1", "a:b:c", "h:+1", "h:00080"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		c, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{addr}})
		if err != nil {
			return
		}
		defer c.Close()
		host, port, serr := net.SplitHostPort(addr)
		n, perr := strconv.Atoi(port)
		if serr != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			t.Fatalf("accepted %q", addr)
		}
	})
}
