package redisstore_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/limit/redisstore"
)

func TestConfigValidation(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	for _, tc := range []struct {
		name string
		cfg  redisstore.Config
		want string // substring of the error; "" means valid
	}{
		{"zero but client", redisstore.Config{Client: client}, ""},
		{"no client", redisstore.Config{}, "Client is required"},
		{"negative lease", redisstore.Config{Client: client, Lease: -time.Second}, "Lease"},
		{"lease too long", redisstore.Config{Client: client, Lease: 25 * time.Hour}, "Lease"},
		{"lease under 3 timeouts", redisstore.Config{Client: client, Lease: 120 * time.Millisecond}, "3 × Timeout"},
		{"lease under 100ms", redisstore.Config{Client: client, Lease: 99 * time.Millisecond, Timeout: time.Millisecond}, "at least 100ms"},
		{"negative timeout", redisstore.Config{Client: client, Timeout: -1}, "Timeout"},
		{"bad policy", redisstore.Config{Client: client, OnError: 7}, "OnError"},
		{"share above 1", redisstore.Config{Client: client, NodeShare: 1.5}, "NodeShare"},
		{"negative share", redisstore.Config{Client: client, NodeShare: -0.1}, "NodeShare"},
		{"node id with space", redisstore.Config{Client: client, NodeID: "a b"}, "NodeID"},
		{"node id too long", redisstore.Config{Client: client, NodeID: strings.Repeat("x", 129)}, "NodeID"},
		{"negative threshold", redisstore.Config{Client: client, BreakerThreshold: -1}, "BreakerThreshold"},
		{"negative backoff", redisstore.Config{Client: client, BreakerBackoff: -1}, "BreakerBackoff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := redisstore.New[string](tc.cfg, nil)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("valid config refused: %v", err)
				}
				st.Close()
				return
			}
			if err == nil {
				st.Close()
				t.Fatalf("accepted, want an error about %s", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "redisstore: ") {
				t.Fatalf("err = %q, want it to name %s", err, tc.want)
			}
		})
	}
}

func TestNodeIDDefaultsToRandom(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	a, _ := redisstore.New[string](redisstore.Config{Client: client, Logger: quiet}, nil)
	b, _ := redisstore.New[string](redisstore.Config{Client: client, Logger: quiet}, nil)
	defer a.Close()
	defer b.Close()
	if len(a.NodeID()) != 16 || a.NodeID() == b.NodeID() {
		t.Fatalf("NodeIDs %q and %q: want distinct 16 hex digits", a.NodeID(), b.NodeID())
	}
}

func TestParsePolicy(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want redisstore.Policy
		err  bool
	}{
		{"", redisstore.Open, false},
		{"open", redisstore.Open, false},
		{"closed", redisstore.Closed, false},
		{"Closed", 0, true},
		{"fail-open", 0, true},
	} {
		got, err := redisstore.ParsePolicy(tc.in)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("ParsePolicy(%q) = %v, %v", tc.in, got, err)
		}
		if !tc.err && got.String() != map[redisstore.Policy]string{redisstore.Open: "open", redisstore.Closed: "closed"}[got] {
			t.Errorf("String of %v", got)
		}
	}
}

func TestClientOptionsValidation(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		opts redisstore.ClientOptions
		want string
	}{
		{"one address", redisstore.ClientOptions{Addrs: []string{"127.0.0.1:6379"}}, ""},
		{"cluster seeds", redisstore.ClientOptions{Addrs: []string{"10.0.0.1:7000", "[::1]:7001"}}, ""},
		{"no address", redisstore.ClientOptions{}, "Addrs is required"},
		{"no port", redisstore.ClientOptions{Addrs: []string{"localhost"}}, "Addrs[0]"},
		{"port zero", redisstore.ClientOptions{Addrs: []string{"h:0"}}, "port"},
		{"port too big", redisstore.ClientOptions{Addrs: []string{"h:65536"}}, "port"},
		{"no host", redisstore.ClientOptions{Addrs: []string{":6379"}}, "no host"},
		{"both passwords", redisstore.ClientOptions{Addrs: []string{"h:1"}, Password: "x", PasswordFile: "/x"}, "not both"},
		{"missing password file", redisstore.ClientOptions{Addrs: []string{"h:1"}, PasswordFile: filepath.Join(dir, "none")}, "password file"},
		{"negative db", redisstore.ClientOptions{Addrs: []string{"h:1"}, DB: -1}, "DB"},
		{"db on a cluster", redisstore.ClientOptions{Addrs: []string{"h:1", "h:2"}, DB: 2}, "DB must be 0"},
		{"negative pool", redisstore.ClientOptions{Addrs: []string{"h:1"}, PoolSize: -1}, "PoolSize"},
		{"negative dial timeout", redisstore.ClientOptions{Addrs: []string{"h:1"}, DialTimeout: -1}, "DialTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := redisstore.NewClient(tc.opts)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				c.Close()
				return
			}
			if err == nil {
				c.Close()
				t.Fatalf("accepted, want an error about %s", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %q, want %s", err, tc.want)
			}
		})
	}
}

// NewClient reads PasswordFile and sets the options the Store relies on.
func TestNewClientPasswordFileAndOptions(t *testing.T) {
	srv := startRedis(t)
	admin := newClient(t, srv.Addr())
	ctx := t.Context()
	if err := admin.ConfigSet(ctx, "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{srv.Addr()}, PasswordFile: file})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with the password from the file: %v", err)
	}
	o := c.(*redis.Client).Options()
	if o.MaxRetries != 0 || !o.ContextTimeoutEnabled { // go-redis stores -1 as 0: no retry
		t.Fatalf("MaxRetries %d, ContextTimeoutEnabled %v", o.MaxRetries, o.ContextTimeoutEnabled)
	}
	bad, _ := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{srv.Addr()}, Password: "wrong"})
	defer bad.Close()
	if err := bad.Ping(ctx).Err(); err == nil {
		t.Fatal("PING with a wrong password succeeded")
	}
}
