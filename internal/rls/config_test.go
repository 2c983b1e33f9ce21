package rls

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/rate"
)

// examplesDir holds the example rule files, in the shapes of
// envoyproxy/ratelimit's README: every one must load, alone and together.
const examplesDir = "../../examples/envoy/config"

func TestExamplesLoad(t *testing.T) {
	cfg, err := LoadDir(examplesDir)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(examplesDir, "*"))
	if err != nil || len(files) < 4 {
		t.Fatalf("expected at least 4 example files, got %v (%v)", files, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		one, err := Parse(map[string][]byte{f: data})
		if err != nil {
			t.Errorf("%s alone: %v", f, err)
			continue
		}
		if len(one.Rules()) == 0 {
			t.Errorf("%s holds no rule", f)
		}
	}
	if got := strings.Join(cfg.Domains(), ","); got != "api,edge_proxy,messaging,mongo_cps" {
		t.Errorf("domains %s", got)
	}
}

func entries(kv ...string) []*rlpb.RateLimitDescriptor_Entry {
	var out []*rlpb.RateLimitDescriptor_Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, &rlpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// The lookup of the reference: value first, then a wildcard, then the
// key alone; the rule applies only at the last entry.
func TestMatch(t *testing.T) {
	cfg, err := LoadDir(examplesDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		domain string
		kv     []string
		want   string // rule ID, "" none
	}{
		{"mongo_cps", []string{"database", "users"}, "mongo_cps.database_users"},
		{"mongo_cps", []string{"database", "other"}, ""},
		{"mongo_cps", []string{"database", "users", "extra", "x"}, ""},
		{"messaging", []string{"message_type", "marketing", "to_number", "2061111111"}, "messaging.message_type_marketing.to_number"},
		{"messaging", []string{"message_type", "marketing"}, ""},
		{"messaging", []string{"to_number", "2061111111"}, "messaging.to_number"},
		{"edge_proxy", []string{"remote_address", "10.0.0.1"}, "edge_proxy.remote_address_10.0.0.1"},
		{"edge_proxy", []string{"remote_address", "192.0.2.77"}, "edge_proxy.remote_address_192.0.2.*"},
		{"edge_proxy", []string{"remote_address", "198.51.100.7"}, "edge_proxy.remote_address"},
		{"edge_proxy", []string{"remote_address", "198.51.100.7", "path", "/login"}, "edge_proxy.remote_address.path_/login"},
		{"edge_proxy", []string{"remote_address", "198.51.100.7", "path", "/other"}, ""},
		{"edge_proxy", []string{"source_cluster", "proxy", "destination_cluster", "mock"}, "edge_proxy.source_cluster_proxy.destination_cluster_mock"},
		{"edge_proxy", []string{"source_cluster", "other", "destination_cluster", "mock"}, ""},
		{"nowhere", []string{"remote_address", "1.2.3.4"}, ""},
	} {
		r := cfg.match(tc.domain, entries(tc.kv...))
		got := ""
		if r != nil {
			got = r.ID
		}
		if got != tc.want {
			t.Errorf("%s %v: rule %q, want %q", tc.domain, tc.kv, got, tc.want)
		}
	}
}

// What a rule means as a GCRA limit: N per unit is N at once, then N per
// unit spread evenly; Portcullis's words change that.
func TestRuleLimits(t *testing.T) {
	cfg, err := LoadDir(examplesDir)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*Rule{}
	for _, r := range cfg.Rules() {
		byID[r.ID] = r
	}
	for id, want := range map[string]string{
		"mongo_cps.database_users": "500r/s burst=499 nodelay",
		"api.api_key":              "600r/m burst=20 nodelay",
		"api.upload":               "2r/s burst=10 delay=4",
	} {
		if got := byID[id].Limit.String(); got != want {
			t.Errorf("%s: %s, want %s", id, got, want)
		}
	}
	r := byID["api.api_key"]
	if got := r.limitFor("batch-importer"); got != mustLimit(t, "6000r/m burst=200 nodelay") {
		t.Errorf("override: %v", got)
	}
	if got := r.limitFor("someone"); got != r.Limit {
		t.Errorf("no override: %v", got)
	}
	if !byID["edge_proxy.blocked_tenant"].Deny || !byID["edge_proxy.remote_address_10.0.0.1"].Unlimited {
		t.Error("deny or unlimited rule misread")
	}
}

// Every problem is reported at its file:line:col with its path, as the
// daemon's configuration errors are, all at once.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown key", "domain: d\ndescriptors:\n  - key: k\n    rate_limits: {unit: second, requests_per_unit: 1}\n",
			[]string{`f.yaml:4:5: descriptors[0].rate_limits: unknown field; did you mean "rate_limit"?`}},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
			[]string{`f.yaml:4:24: descriptors[0].rate_limit.unit: must be second, minute, hour, day, week, month or year (got "fortnight")`}},
		{"no domain", "descriptors:\n  - key: k\n", []string{"f.yaml:1:1: domain: a rule file needs a domain"}},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", []string{"f.yaml:3:5: descriptors[0].key: a descriptor needs a key"}},
		{"duplicate", "domain: d\ndescriptors:\n  - key: k\n  - key: k\n", []string{"f.yaml:4:10: descriptors[1].key: duplicate descriptor d.k"}},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
			[]string{"descriptors[0].rate_limit.unit: an unlimited rule takes no unit"}},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      name: a\n      replaces: [{name: a}]\n",
			[]string{"f.yaml:8:25: descriptors[0].rate_limit.replaces[0].name: a rule cannot replace itself"}},
		{"negative burst and both delays", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: -1, delay: 1, nodelay: true}\n",
			[]string{"descriptors[0].rate_limit.burst: must be 0 or more (got -1)", "descriptors[0].rate_limit.delay: delay and nodelay exclude each other"}},
		{"bad override", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      overrides: {x: \"10 per second\"}\n",
			[]string{`f.yaml:7:22: descriptors[0].rate_limit.overrides["x"]:`}},
		{"wrong type", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: many}\n",
			[]string{"descriptors[0].rate_limit.requests_per_unit: must be an integer"}},
		{"not yaml", "domain: [\n", []string{"f.yaml:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(map[string][]byte{"f.yaml": []byte(tc.yaml)})
			if err == nil {
				t.Fatal("loaded")
			}
			if !errors.Is(err, config.ErrInvalid) {
				t.Errorf("%v does not wrap config.ErrInvalid", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\nlacks\n%s", err, w)
				}
			}
		})
	}
}

// Two files with one domain are refused, naming both; one bad file fails
// the whole load (all or nothing).
func TestConfigAcrossFiles(t *testing.T) {
	good := []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	_, err := Parse(map[string][]byte{"a.yaml": good, "b.yaml": good})
	if err == nil || !strings.Contains(err.Error(), `b.yaml:1:9: domain: domain "d" is also in a.yaml`) {
		t.Errorf("duplicate domain: %v", err)
	}
	_, err = Parse(map[string][]byte{"a.yaml": good, "c.yaml": []byte("domain: e\nbogus: 1\n")})
	if err == nil || !strings.Contains(err.Error(), "c.yaml:2:1: bogus: unknown field") {
		t.Errorf("one bad file: %v", err)
	}
	dir := t.TempDir()
	if _, err := LoadDir(dir); err == nil {
		t.Error("an empty directory loaded")
	}
}

// FuzzParse: no rule file makes the loader panic, and whatever loads can
// be matched against.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(examplesDir, "*"))
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: \"v*\"\n    rate_limit: {unit: day, requests_per_unit: 0}\n"))
	f.Add([]byte("domain: d\ndescriptors: &a\n  - key: k\n    descriptors: *a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(map[string][]byte{"f.yaml": data})
		if err != nil {
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("an error that does not wrap ErrInvalid: %v", err)
			}
			return
		}
		for _, d := range cfg.Domains() {
			cfg.match(d, entries("k", "v", "k", "vv"))
		}
		for _, r := range cfg.Rules() {
			if !r.Unlimited && !r.Deny && r.Limit.Validate() != nil {
				t.Fatalf("rule %s loaded with an invalid limit %v", r.ID, r.Limit)
			}
		}
	})
}

func mustLimit(t *testing.T, s string) rate.Limit {
	t.Helper()
	l, err := rate.ParseLimit(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A reload is all or nothing: a directory with one bad file leaves the
// rules in use (and their counts) serving; a good one takes over from the
// next request, the counts of unchanged counters carried over.
func TestReloadDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n")
	cfg, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, cfg, nil, ServerOptions{})
	h.ask(t, "d", 2, desc("k", "v"))
	write("b.yaml", "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: -1}\n")
	if _, err := h.svc.ReloadDir(dir); err == nil || !strings.Contains(err.Error(), "b.yaml:4:49: descriptors[0].rate_limit.requests_per_unit") {
		t.Fatalf("a bad file reloaded: %v", err)
	}
	if h.svc.Config() != cfg {
		t.Fatal("a failed reload replaced the rules")
	}
	if r := h.ask(t, "d", 0, desc("k", "v")); r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("the old rules lost their counts: %v", r)
	}
	write("b.yaml", "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	write("a.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	if _, err := h.svc.ReloadDir(dir); err != nil {
		t.Fatal(err)
	}
	// The key's state carries over (its quota used up for the next hour);
	// the new limit governs its refill: one request per 12 minutes.
	if r := h.ask(t, "d", 0, desc("k", "v")); r.OverallCode != over || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 5 {
		t.Fatalf("after the reload: %v", r)
	}
	h.clock.Advance(12 * time.Minute)
	if r := h.ask(t, "d", 0, desc("k", "v")); r.OverallCode != ok {
		t.Fatalf("12 minutes after the reload: %v", r)
	}
	if r := h.ask(t, "e", 0, desc("k", "v")); r.OverallCode != ok || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 {
		t.Fatalf("the new domain: %v", r)
	}
}
