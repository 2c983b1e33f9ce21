package forward

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/seed-a07d1050/portcullis/httplimit"
)

// ByTargetHost keys a forward-proxy request by its normalised target,
// "host:port" as [Target.String] writes it ("example.com:443",
// "[2001:db8::1]:80"), for a target_host limit: CONNECT example.com:443 and
// CONNECT EXAMPLE.com.:443 count under one key. A request served inside an
// intercepted TLS session is keyed by its session's target (see
// [WithInterceptedTarget]). A request whose target does not parse is not
// limited; the Proxy answers it 400 without any target work.
func ByTargetHost() httplimit.KeyFunc {
	return func(r *http.Request) string {
		if t, ok := InterceptedTarget(r.Context()); ok {
			return t.String()
		}
		t, err := TargetOf(r)
		if err != nil {
			return ""
		}
		return t.String()
	}
}

// ExceptConnect keys every request as key does except CONNECT requests,
// which it leaves unlimited (not counted, never refused). With
// httplimit.Config.ReleaseTunnels it gives the seed's countTunnels(false):
// CONNECTs are not counted, and an upgraded connection (WebSocket through
// an absolute-form request) holds its permit only until its 101.
func ExceptConnect(key httplimit.KeyFunc) httplimit.KeyFunc {
	return func(r *http.Request) string {
		if r.Method == http.MethodConnect {
			return ""
		}
		return key(r)
	}
}

// TargetPermits turns per-target overrides into an
// httplimit.Policy.PermitsFor function over [ByTargetHost] keys. A key of
// overrides is "host:port", which matches that port only, or "host", which
// matches every port of the host; both are normalised as targets are
// ("Example.COM." is "example.com"), and host:port wins over host. It
// returns an error naming the first key that is not a valid target, or two
// keys naming the same target.
func TargetPermits(overrides map[string]int) (func(key string) int, error) {
	exact := make(map[string]int)
	anyPort := make(map[string]int)
	for k, n := range overrides {
		var t Target
		var err error
		noPort := strings.HasSuffix(k, "]") || strings.Count(k, ":") == 0
		if noPort {
			t, err = ParseTarget(k, 1) // any port: only the host is kept
		} else {
			t, err = ParseTarget(k, 0) // 0: an empty port is refused
		}
		if err != nil {
			return nil, fmt.Errorf("forward: target override %q: %w", k, err)
		}
		m, key := exact, t.String()
		if noPort {
			m, key = anyPort, t.s[:t.hostEnd]
		}
		if _, dup := m[key]; dup {
			return nil, fmt.Errorf("forward: target overrides name %s twice", key)
		}
		m[key] = n
	}
	if len(overrides) == 0 {
		return nil, nil
	}
	return func(key string) int {
		if n, ok := exact[key]; ok {
			return n
		}
		if i := strings.LastIndexByte(key, ':'); i > 0 {
			if n, ok := anyPort[key[:i]]; ok {
				return n
			}
		}
		return 0
	}, nil
}
