package intercept_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/intercept"
)

func newLeaves(t testing.TB, cfg intercept.LeavesConfig) *intercept.Leaves {
	t.Helper()
	if cfg.CA == nil {
		cfg.CA = sharedCA().ca
	}
	l, err := intercept.NewLeaves(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// fakeClock is a time source tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestLeavesMintOncePerNameConcurrently(t *testing.T) {
	l := newLeaves(t, intercept.LeavesConfig{})
	const names, callers = 50, 200
	var wg sync.WaitGroup
	start := make(chan struct{})
	certs := make([]*x509.Certificate, callers)
	for i := range callers {
		wg.Go(func() {
			<-start
			c, err := l.Get(fmt.Sprintf("n%d.example", i%names))
			if err != nil {
				t.Error(err)
				return
			}
			certs[i] = c.Leaf
		})
	}
	close(start)
	wg.Wait()
	st := l.Stats()
	if st.Minted != names || st.Minted+st.Hits+st.Shared != callers || st.Cached != names {
		t.Errorf("stats %+v, want %d minted for %d callers", st, names, callers)
	}
	for i := range callers {
		if certs[i] != nil && !certs[i].Equal(certs[i%names]) {
			t.Errorf("caller %d got another leaf than caller %d for the same name", i, i%names)
		}
	}
}

func TestLeafProperties(t *testing.T) {
	ca := sharedCA()
	l := newLeaves(t, intercept.LeavesConfig{})
	before := time.Now()
	for _, tc := range []struct {
		host string
		dns  string
		ip   string
	}{
		{"example.com", "example.com", ""},
		{"Bücher.Example.", "xn--bcher-kva.example", ""},
		{"127.0.0.1", "", "127.0.0.1"},
		{"2001:db8::1", "", "2001:db8::1"},
		{"::ffff:192.0.2.1", "", "192.0.2.1"},
	} {
		t.Run(tc.host, func(t *testing.T) {
			cert, err := l.Get(tc.host)
			if err != nil {
				t.Fatal(err)
			}
			leaf := cert.Leaf
			opts := x509.VerifyOptions{Roots: ca.pool, DNSName: tc.dns}
			if tc.ip != "" {
				if len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.ParseIP(tc.ip)) || len(leaf.DNSNames) != 0 {
					t.Errorf("SANs %v %v, want IP %s", leaf.DNSNames, leaf.IPAddresses, tc.ip)
				}
				opts.DNSName = tc.ip
			} else if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != tc.dns || len(leaf.IPAddresses) != 0 {
				t.Errorf("SANs %v %v, want DNS %s", leaf.DNSNames, leaf.IPAddresses, tc.dns)
			}
			if _, err := leaf.Verify(opts); err != nil {
				t.Errorf("the leaf does not verify under the CA: %v", err)
			}
			if leaf.IsCA || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
				t.Errorf("IsCA %v, ext key usage %v", leaf.IsCA, leaf.ExtKeyUsage)
			}
			if k, ok := cert.PrivateKey.(*ecdsa.PrivateKey); !ok || k.Curve != elliptic.P256() {
				t.Errorf("key %T, want ECDSA P-256", cert.PrivateKey)
			}
			if len(cert.Certificate) != 2 {
				t.Errorf("chain of %d certificates, want leaf and CA", len(cert.Certificate))
			}
			if d := leaf.NotAfter.Sub(before); d < intercept.DefaultLeafValidity-time.Minute || d > intercept.DefaultLeafValidity+time.Minute {
				t.Errorf("valid until %s from now", d)
			}
			if d := before.Sub(leaf.NotBefore); d < intercept.DefaultLeafBackdate-time.Minute || d > intercept.DefaultLeafBackdate+time.Minute {
				t.Errorf("NotBefore %s ago, want the backdate", d)
			}
		})
	}
	// Two spellings of a name are one leaf.
	a, _ := l.Get("example.com")
	b, _ := l.Get("EXAMPLE.com.")
	if a != b {
		t.Error("Example spellings got two leaves")
	}
}

func TestLeafRenewal(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	l := newLeaves(t, intercept.LeavesConfig{})
	intercept.SetLeavesClock(l, clock.Now)
	first, err := l.Get("renew.example")
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(18*time.Hour - time.Second) // 6 h left: not yet
	if c, _ := l.Get("renew.example"); c != first {
		t.Error("renewed with more than RenewBefore left")
	}
	clock.Add(2 * time.Second)
	second, _ := l.Get("renew.example")
	if second == first {
		t.Fatal("not renewed with less than RenewBefore left")
	}
	if !second.Leaf.NotAfter.After(first.Leaf.NotAfter) {
		t.Error("the renewed leaf does not last longer")
	}
	if st := l.Stats(); st.Minted != 2 || st.Hits != 1 {
		t.Errorf("stats %+v", st)
	}
}

// A CA about to expire cuts its leaves short; they are renewed as their
// life wanes, not at every handshake.
func TestLeafClampedToCAExpiry(t *testing.T) {
	ca := newTestCA(t, intercept.CAOptions{Validity: 2 * time.Hour})
	clock := &fakeClock{now: time.Now()}
	l := newLeaves(t, intercept.LeavesConfig{CA: ca.ca})
	intercept.SetLeavesClock(l, clock.Now)
	c, err := l.Get("short.example")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Leaf.NotAfter.Equal(ca.ca.Certificate().NotAfter) {
		t.Errorf("leaf until %s, CA until %s", c.Leaf.NotAfter, ca.ca.Certificate().NotAfter)
	}
	for range 10 {
		l.Get("short.example")
	}
	if st := l.Stats(); st.Minted != 1 {
		t.Errorf("minted %d for one name, want 1", st.Minted)
	}
	clock.Add(3 * time.Hour) // the CA has expired
	if _, err := l.Get("short.example"); !errors.Is(err, intercept.ErrCAExpired) {
		t.Errorf("after the CA's expiry: %v, want ErrCAExpired", err)
	}
}

func TestLeafCacheBounded(t *testing.T) {
	l := newLeaves(t, intercept.LeavesConfig{CacheSize: 3})
	for _, n := range []string{"a.example", "b.example", "c.example", "a.example", "d.example", "e.example"} {
		if _, err := l.Get(n); err != nil {
			t.Fatal(err)
		}
	}
	// a was used again before d and e came: b and c were the least recent.
	if st := l.Stats(); st.Cached != 3 || st.Evicted != 2 || st.Minted != 5 || st.Hits != 1 {
		t.Errorf("stats %+v", st)
	}
	l.Get("a.example")
	if st := l.Stats(); st.Hits != 2 {
		t.Errorf("a was evicted: %+v", st)
	}
	l.Get("b.example")
	if st := l.Stats(); st.Minted != 6 {
		t.Errorf("b was kept: %+v", st)
	}
}

func TestLeafBadNames(t *testing.T) {
	l := newLeaves(t, intercept.LeavesConfig{})
	for _, host := range []string{"", "a..b", "-x.example", "x.example:443", "fe80::1%eth0", "127.1", strings.Repeat("a", 300), "a b"} {
		if c, err := l.Get(host); err == nil {
			t.Errorf("Get(%q) minted %v", host, c.Leaf.DNSNames)
		}
	}
	if st := l.Stats(); st.Minted != 0 || st.Errors == 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestLeavesConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  intercept.LeavesConfig
		want string
	}{
		{intercept.LeavesConfig{}, "CA is required"},
		{intercept.LeavesConfig{CA: sharedCA().ca, Validity: -time.Hour}, "Validity"},
		{intercept.LeavesConfig{CA: sharedCA().ca, RenewBefore: 24 * time.Hour}, "RenewBefore"},
		{intercept.LeavesConfig{CA: sharedCA().ca, RenewBefore: -time.Hour}, "RenewBefore"},
		{intercept.LeavesConfig{CA: sharedCA().ca, CacheSize: -1}, "CacheSize"},
	} {
		if _, err := intercept.NewLeaves(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewLeaves(%+v): %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
