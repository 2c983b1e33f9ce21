package config_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

// base is a valid listener block that the cases below extend; its lines are 1 to 5.
const base = `listeners:
  - protocol: http
    listen: 127.0.0.1:8080
    routes:
      - upstreams: [http://127.0.0.1:9000]
`

// files is the absolute directory of the test key and certificate files, as Parse resolves
// relative paths against the directory of the file name it is given.
func files(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("testdata/files")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestParseErrors feeds one kind of bad configuration per case and checks the exact single
// message, position included.
func TestParseErrors(t *testing.T) {
	dir := files(t)
	for _, tt := range badConfigs {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse("portcullis.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse succeeded, want error %q", tt.want)
			}
			if c != nil {
				t.Errorf("Parse returned a Config with its error")
			}
			want := strings.ReplaceAll(tt.want, "$FILES", dir)
			if got := err.Error(); got != want {
				t.Errorf("error:\n got  %s\n want %s", got, want)
			}
			if !errors.Is(err, config.ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid")
			}
			var e *config.Error
			if !errors.As(err, &e) {
				t.Errorf("error is not a *config.Error")
			}
		})
	}
}

// badConfigs holds one bad configuration per kind of mistake and its exact error.
var badConfigs = []struct {
	name string
	yaml string
	want string // $FILES stands for the absolute testdata/files directory
}{
	// The YAML text itself.
	{"yaml syntax", "listeners:\n  - protocol: http\n   listen: x\n",
		"portcullis.yaml:1: invalid YAML: did not find expected '-' indicator"},
	{"tab indentation", "log:\n\tlevel: info\n",
		"portcullis.yaml:2: invalid YAML: found character that cannot start any token"},
	{"empty file", "",
		"portcullis.yaml: the configuration is empty: at least one listener is required"},
	{"only comments", "# nothing here\n",
		"portcullis.yaml: the configuration is empty: at least one listener is required"},
	{"two documents", base + "---\nlog: {}\n",
		"portcullis.yaml:6:1: a second YAML document: the configuration must be a single document"},
	{"root is a list", "- listeners\n",
		"portcullis.yaml:1:1: must be a mapping of fields (got a list)"},
	{"duplicate key", base + "log: {level: info}\nlog: {level: warn}\n",
		`portcullis.yaml:7:1: log: duplicate key (first at line 6)`},
	{"duplicate key in map", base + "    client_limit: {overrides: {10.0.0.1: 2, 10.0.0.1: 3}}\n",
		`portcullis.yaml:6:45: listeners[0].client_limit.overrides["10.0.0.1"]: duplicate key (first at line 6)`},
	{"non-string key", base + "log: {[a]: 1}\n",
		`portcullis.yaml:6:7: log: keys must be plain names (got a list)`},

	// Unknown fields and wrong types.
	{"unknown top-level field", "lsteners: []\n",
		`portcullis.yaml:1:1: lsteners: unknown field; did you mean "listeners"?`},
	{"unknown field with suggestion", base + "        limit: {permit: 8}\n",
		`portcullis.yaml:6:17: listeners[0].routes[0].limit.permit: unknown field; did you mean "permits"?`},
	{"unknown field", base + "    backend: x\n",
		`portcullis.yaml:6:5: listeners[0].backend: unknown field`},
	{"string for integer", base + "        limit: {permits: eight}\n",
		`portcullis.yaml:6:26: listeners[0].routes[0].limit.permits: must be an integer (got "eight")`},
	{"float for integer", base + "    max_conns: 1.5\n",
		`portcullis.yaml:6:16: listeners[0].max_conns: must be an integer (got 1.5)`},
	{"quoted integer", base + "    max_conns: \"10\"\n",
		`portcullis.yaml:6:16: listeners[0].max_conns: must be an integer (got "10")`},
	{"mapping for list", "listeners: {protocol: http}\n",
		`portcullis.yaml:1:12: listeners: must be a list (got a mapping)`},
	{"list for mapping", base + "log: [json]\n",
		`portcullis.yaml:6:6: log: must be a mapping of fields (got a list)`},
	{"string for bool", base + "log: {access_log: yes}\n",
		`portcullis.yaml:6:19: log.access_log: must be true or false (got "yes")`},
	{"list for string", base + "admin: {listen: [a]}\n",
		`portcullis.yaml:6:17: admin.listen: must be a string (got a list)`},
	{"duration without unit", base + "shutdown_timeout: 30\n",
		`portcullis.yaml:6:19: shutdown_timeout: must be a duration such as 10s or 1m30s, with a unit (got 30)`},
	{"bad duration", base + "shutdown_timeout: 30 seconds\n",
		`portcullis.yaml:6:19: shutdown_timeout: must be a duration such as 10s or 1m30s (got "30 seconds")`},
	{"none for other duration", base + "shutdown_timeout: none\n",
		`portcullis.yaml:6:19: shutdown_timeout: must be a duration such as 10s or 1m30s (got "none")`},
	{"negative duration", base + "    read_timeout: -1s\n",
		`portcullis.yaml:6:19: listeners[0].read_timeout: must be 0 or more (got -1s)`},
	{"string for number", "cluster: {redis: {addrs: [\"127.0.0.1:6379\"]}, node_share: half}\n" + base,
		`portcullis.yaml:1:59: cluster.node_share: must be a number (got "half")`},

	// Top level.
	{"no listeners", "listeners: []\n",
		`portcullis.yaml:1:12: listeners: at least one listener is required`},
	{"no listeners key", "log: {level: info}\n",
		`portcullis.yaml:1:1: listeners: at least one listener is required`},
	{"log format", base + "log: {format: xml}\n",
		`portcullis.yaml:6:15: log.format: must be text or json (got "xml")`},
	{"log level", base + "log: {level: verbose}\n",
		`portcullis.yaml:6:14: log.level: must be one of debug, info, warn, error (got "verbose")`},
	{"admin listen", base + "admin: {listen: localhost}\n",
		`portcullis.yaml:6:17: admin.listen: must be host:port, such as 127.0.0.1:8080 (got "localhost")`},
	{"admin listen taken", base + "admin: {listen: \"127.0.0.1:8080\"}\n",
		`portcullis.yaml:3:13: listeners[0].listen: already used by admin.listen (got "127.0.0.1:8080")`},
	{"negative shutdown", base + "shutdown_timeout: -5s\n",
		`portcullis.yaml:6:19: shutdown_timeout: must be 0 or more (got -5s)`},

	// Cluster.
	{"syn_filter with cluster-wide caps", base + "    syn_filter: true\ncluster: {redis: {addrs: [\"127.0.0.1:6379\"]}}\n",
		`portcullis.yaml:6:17: listeners[0].syn_filter: cannot be combined with cluster-wide connection caps: the kernel sees only this node's counts (set cluster.local_connection_caps)`},
	{"cluster without addrs", base + "cluster: {redis: {}}\n",
		`portcullis.yaml:6:18: cluster.redis.addrs: at least one host:port is required`},
	{"redis addr without port", base + "cluster: {redis: {addrs: [redis]}}\n",
		`portcullis.yaml:6:27: cluster.redis.addrs[0]: must be host:port, such as 127.0.0.1:8080 (got "redis")`},
	{"redis addr port 0", base + "cluster: {redis: {addrs: [\"redis:0\"]}}\n",
		`portcullis.yaml:6:27: cluster.redis.addrs[0]: port must be a number from 1 to 65535 (got "redis:0")`},
	{"redis addr duplicate", base + "cluster: {redis: {addrs: [\"r:1\", \"r:1\"]}}\n",
		`portcullis.yaml:6:34: cluster.redis.addrs[1]: duplicate address (also addrs[0]) (got "r:1")`},
	{"redis db in cluster", base + "cluster: {redis: {addrs: [\"a:1\", \"b:1\"], db: 2}}\n",
		`portcullis.yaml:6:46: cluster.redis.db: must be 0 with several addrs: a Redis Cluster has database 0 only (got 2)`},
	{"redis db negative", base + "cluster: {redis: {addrs: [\"a:1\"], db: -1}}\n",
		`portcullis.yaml:6:39: cluster.redis.db: must be 0 or more (got -1)`},
	{"redis password file missing", base + "cluster: {redis: {addrs: [\"a:1\"], password_file: testdata/files/nope}}\n",
		`portcullis.yaml:6:50: cluster.redis.password_file: cannot read: no such file or directory (got "$FILES/nope")`},
	{"redis password file empty", base + "cluster: {redis: {addrs: [\"a:1\"], password_file: testdata/files/empty.password}}\n",
		`portcullis.yaml:6:50: cluster.redis.password_file: is empty (got "$FILES/empty.password")`},
	{"redis tls file while disabled", base + "cluster: {redis: {addrs: [\"a:1\"], tls: {ca_file: testdata/files/server.crt}}}\n",
		`portcullis.yaml:6:50: cluster.redis.tls.ca_file: set but tls.enabled is false, so Redis would be reached in plain text (got "$FILES/server.crt")`},
	{"redis tls ca garbage", base + "cluster: {redis: {addrs: [\"a:1\"], tls: {enabled: true, ca_file: testdata/files/garbage.pem}}}\n",
		`portcullis.yaml:6:65: cluster.redis.tls.ca_file: holds no PEM certificate (got "$FILES/garbage.pem")`},
	{"redis tls cert without key", base + "cluster: {redis: {addrs: [\"a:1\"], tls: {enabled: true, cert_file: testdata/files/server.crt}}}\n",
		`portcullis.yaml:6:40: cluster.redis.tls.key_file: required with cert_file`},
	{"redis tls key without cert", base + "cluster: {redis: {addrs: [\"a:1\"], tls: {enabled: true, key_file: testdata/files/server.key}}}\n",
		`portcullis.yaml:6:40: cluster.redis.tls.cert_file: required with key_file`},
	{"redis tls key does not match", base + "cluster: {redis: {addrs: [\"a:1\"], tls: {enabled: true, cert_file: testdata/files/server.crt, key_file: testdata/files/other.key}}}\n",
		`portcullis.yaml:6:67: cluster.redis.tls.cert_file: does not load with key_file: private key does not match public key (got "$FILES/server.crt")`},
	{"redis tls server name", base + "cluster: {redis: {addrs: [\"a:1\"], tls: {enabled: true, server_name: \"a b\"}}}\n",
		`portcullis.yaml:6:69: cluster.redis.tls.server_name: must be a host name or an IP address (got "a b")`},
	{"lease too short", base + "cluster: {redis: {addrs: [\"a:1\"]}, lease: 500ms}\n",
		`portcullis.yaml:6:43: cluster.lease: must be at least 1s (got 500ms)`},
	{"timeout not below lease", base + "cluster: {redis: {addrs: [\"a:1\"]}, lease: 2s, timeout: 2s}\n",
		`portcullis.yaml:6:56: cluster.timeout: must be shorter than lease (2s) (got 2s)`},
	{"negative timeout", base + "cluster: {redis: {addrs: [\"a:1\"]}, timeout: -1ms}\n",
		`portcullis.yaml:6:45: cluster.timeout: must be 0 or more (got -1ms)`},
	{"on_error", base + "cluster: {redis: {addrs: [\"a:1\"]}, on_error: fail}\n",
		`portcullis.yaml:6:46: cluster.on_error: must be open or closed (got "fail")`},
	{"string for local_connection_caps", base + "cluster: {redis: {addrs: [\"a:1\"]}, local_connection_caps: sometimes}\n",
		`portcullis.yaml:6:59: cluster.local_connection_caps: must be true or false (got "sometimes")`},
	{"node_share above 1", base + "cluster: {redis: {addrs: [\"a:1\"]}, node_share: 1.5}\n",
		`portcullis.yaml:6:48: cluster.node_share: must be from 0 to 1, 0 meaning 1 (got 1.5)`},
	{"node_share NaN", base + "cluster: {redis: {addrs: [\"a:1\"]}, node_share: .nan}\n",
		`portcullis.yaml:6:48: cluster.node_share: must be from 0 to 1, 0 meaning 1 (got NaN)`},

	// Listeners.
	{"protocol missing", "listeners:\n  - listen: 127.0.0.1:8080\n",
		`portcullis.yaml:2:5: listeners[0].protocol: required: one of http, https, tcp, http3`},
	{"protocol unknown", "listeners:\n  - protocol: h2c\n    listen: 127.0.0.1:8080\n",
		`portcullis.yaml:2:15: listeners[0].protocol: must be one of http, https, tcp, http3 (got "h2c")`},
	{"listen missing", "listeners:\n  - protocol: http\n    routes: [{upstreams: [http://a]}]\n",
		`portcullis.yaml:2:5: listeners[0].listen: required: a host:port such as 127.0.0.1:8080`},
	{"listen without port", strings.Replace(base, "127.0.0.1:8080", "127.0.0.1", 1),
		`portcullis.yaml:3:13: listeners[0].listen: must be host:port, such as 127.0.0.1:8080 (got "127.0.0.1")`},
	{"listen IPv6 without brackets", strings.Replace(base, "127.0.0.1:8080", "\"::1:8080\"", 1),
		`portcullis.yaml:3:13: listeners[0].listen: must be host:port with an IPv6 address in brackets, such as [::1]:8080 (got "::1:8080")`},
	{"listen named port", strings.Replace(base, "127.0.0.1:8080", "127.0.0.1:http", 1),
		`portcullis.yaml:3:13: listeners[0].listen: port must be a number from 0 to 65535 (got "127.0.0.1:http")`},
	{"listen port too big", strings.Replace(base, "127.0.0.1:8080", "127.0.0.1:65536", 1),
		`portcullis.yaml:3:13: listeners[0].listen: port must be a number from 0 to 65535 (got "127.0.0.1:65536")`},
	{"listen bad host", strings.Replace(base, "127.0.0.1:8080", "\"bad host:80\"", 1),
		`portcullis.yaml:3:13: listeners[0].listen: host must be an IP address or a host name (got "bad host:80")`},
	{"listen IPv4 in brackets", strings.Replace(base, "127.0.0.1:8080", "\"[127.0.0.1]:80\"", 1),
		`portcullis.yaml:3:13: listeners[0].listen: only an IPv6 address goes in brackets (got "[127.0.0.1]:80")`},
	{"listen twice", base + "  - protocol: tcp\n    listen: 127.0.0.1:8080\n    upstream: 127.0.0.1:5432\n",
		`portcullis.yaml:7:13: listeners[1].listen: already used by listeners[0].listen (got "127.0.0.1:8080")`},
	{"name with space", base + "    name: my web\n",
		`portcullis.yaml:6:11: listeners[0].name: must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit (got "my web")`},
	{"duplicate listener name", base + "    name: web\n  - name: web\n    protocol: tcp\n    listen: :5432\n    upstream: db:5432\n",
		`portcullis.yaml:7:11: listeners[1].name: duplicate listener name "web" (also listeners[0])`},
	{"name clashes with a default name", base + "    name: tcp-1\n  - protocol: tcp\n    listen: :5432\n    upstream: db:5432\n",
		`portcullis.yaml:7:5: listeners[1].name: duplicate listener name "tcp-1" (also listeners[0])`},
	{"https without tls", strings.Replace(base, "protocol: http", "protocol: https", 1),
		`portcullis.yaml:2:5: listeners[0].tls: required for https listeners: cert_file and key_file`},
	{"https without key_file", strings.Replace(base, "protocol: http", "protocol: https", 1) + "    tls: {cert_file: testdata/files/server.crt}\n",
		`portcullis.yaml:6:10: listeners[0].tls.key_file: required with cert_file`},
	{"https cert missing", strings.Replace(base, "protocol: http", "protocol: https", 1) + "    tls: {cert_file: testdata/files/nope.crt, key_file: testdata/files/server.key}\n",
		`portcullis.yaml:6:22: listeners[0].tls.cert_file: cannot read: no such file or directory (got "$FILES/nope.crt")`},
	{"https key does not match", strings.Replace(base, "protocol: http", "protocol: https", 1) + "    tls: {cert_file: testdata/files/server.crt, key_file: testdata/files/other.key}\n",
		`portcullis.yaml:6:22: listeners[0].tls.cert_file: does not load with key_file: private key does not match public key (got "$FILES/server.crt")`},
	{"https cert garbage", strings.Replace(base, "protocol: http", "protocol: https", 1) + "    tls: {cert_file: testdata/files/garbage.pem, key_file: testdata/files/server.key}\n",
		`portcullis.yaml:6:22: listeners[0].tls.cert_file: does not load with key_file: failed to find any PEM data in certificate input (got "$FILES/garbage.pem")`},
	{"http with tls", base + "    tls: {cert_file: testdata/files/server.crt, key_file: testdata/files/server.key}\n",
		`portcullis.yaml:6:10: listeners[0].tls: only for https and http3 listeners (protocol is http)`},
	{"max_conns_per_client below -1", base + "    max_conns_per_client: -2\n",
		`portcullis.yaml:6:27: listeners[0].max_conns_per_client: must be -1 (unlimited) or more (got -2)`},
	{"negative max_conns", base + "    max_conns: -1\n",
		`portcullis.yaml:6:16: listeners[0].max_conns: must be 0 (no cap) or more (got -1)`},
	{"ipv6_prefix 129", base + "    ipv6_prefix: 129\n",
		`portcullis.yaml:6:18: listeners[0].ipv6_prefix: must be from 1 to 128 (got 129)`},
	{"ipv6_prefix 0", base + "    ipv6_prefix: 0\n",
		`portcullis.yaml:6:18: listeners[0].ipv6_prefix: must be from 1 to 128 (got 0)`},
	{"ipv4_prefix 33", base + "    ipv4_prefix: 33\n",
		`portcullis.yaml:6:18: listeners[0].ipv4_prefix: must be from 1 to 32 (got 33)`},
	{"level without prefix", base + "    prefix_levels: [{max: 10}]\n",
		`portcullis.yaml:6:21: listeners[0].prefix_levels[0]: needs ipv4_prefix or ipv6_prefix (or both)`},
	{"level not shorter than key", base + "    ipv6_prefix: 56\n    prefix_levels: [{ipv6_prefix: 56, max: 10}]\n",
		`portcullis.yaml:7:35: listeners[0].prefix_levels[0].ipv6_prefix: must be shorter than the listener's ipv6_prefix (56), so that a level groups several clients (got 56)`},
	{"level prefix 32", base + "    prefix_levels: [{ipv4_prefix: 32, max: 10}]\n",
		`portcullis.yaml:6:35: listeners[0].prefix_levels[0].ipv4_prefix: must be from 1 to 31 (got 32)`},
	{"level duplicate", base + "    prefix_levels: [{ipv4_prefix: 24, max: 10}, {ipv4_prefix: 24, max: 20}]\n",
		`portcullis.yaml:6:63: listeners[0].prefix_levels[1].ipv4_prefix: duplicate level (also prefix_levels[0]) (got 24)`},
	{"level max 0", base + "    prefix_levels: [{ipv4_prefix: 24, max: 0}]\n",
		`portcullis.yaml:6:44: listeners[0].prefix_levels[0].max: must be 1 or more (got 0)`},
	{"bad CIDR", base + "    trusted_proxies: [10.0.0.0/33]\n",
		`portcullis.yaml:6:23: listeners[0].trusted_proxies[0]: must be a CIDR such as 10.0.0.0/8 or an IP address (got "10.0.0.0/33")`},
	{"CIDR with host bits", base + "    trusted_proxies: [10.1.2.3/16]\n",
		`portcullis.yaml:6:23: listeners[0].trusted_proxies[0]: has bits set after the prefix length; did you mean 10.1.0.0/16? (got 10.1.2.3/16)`},
	{"IPv4-mapped CIDR", base + "    trusted_proxies: [\"::ffff:10.0.0.0/104\"]\n",
		`portcullis.yaml:6:23: listeners[0].trusted_proxies[0]: is IPv4-mapped IPv6; write it as IPv4 (got ::ffff:10.0.0.0/104)`},
	{"address with zone", base + "    trusted_proxies: [\"fe80::1%eth0\"]\n",
		`portcullis.yaml:6:23: listeners[0].trusted_proxies[0]: must be a CIDR such as 10.0.0.0/8 or an IP address (got "fe80::1%eth0")`},
	{"duplicate trusted proxy", base + "    trusted_proxies: [10.0.0.1, 10.0.0.1/32]\n",
		`portcullis.yaml:6:33: listeners[0].trusted_proxies[1]: duplicate CIDR (also trusted_proxies[0]) (got 10.0.0.1/32)`},
	{"override max 0", base + "    conn_overrides: [{cidr: 10.1.0.0/16, max: 0}]\n",
		`portcullis.yaml:6:47: listeners[0].conn_overrides[0].max: must be -1 (unlimited) or 1 or more (got 0)`},
	{"override without cidr", base + "    conn_overrides: [{max: 5}]\n",
		`portcullis.yaml:6:22: listeners[0].conn_overrides[0].cidr: required: a CIDR such as 10.0.0.0/8 or an IP address`},
	{"override narrower than key", base + "    conn_overrides: [{cidr: \"2001:db8::1\", max: 5}]\n",
		`portcullis.yaml:6:29: listeners[0].conn_overrides[0].cidr: is narrower than a client key (the listener's ipv6_prefix is 64), so it could never match one (got 2001:db8::1/128)`},
	{"enforce_above not below max_conns", base + "    max_conns: 100\n    enforce_above: 100\n",
		`portcullis.yaml:7:20: listeners[0].enforce_above: must be below max_conns (100), or the per-client cap could never apply (got 100)`},
	{"forwarded_header", base + "    forwarded_header: x-real-ip\n",
		`portcullis.yaml:6:23: listeners[0].forwarded_header: must be one of x-forwarded-for, forwarded, none (got "x-real-ip")`},
	{"proxy_protocol without trusted proxies", base + "    proxy_protocol: true\n",
		`portcullis.yaml:6:21: listeners[0].proxy_protocol: needs trusted_proxies: the PROXY header is read only from them`},
	{"negative proxy_protocol_timeout", base + "    proxy_protocol_timeout: -3s\n",
		`portcullis.yaml:6:29: listeners[0].proxy_protocol_timeout: must be 0 or more (got -3s)`},
	{"negative write_timeout", base + "    write_timeout: -1m\n",
		`portcullis.yaml:6:20: listeners[0].write_timeout: must be 0 or more (got -1m0s)`},
	{"negative idle_timeout", base + "    idle_timeout: -1h\n",
		`portcullis.yaml:6:19: listeners[0].idle_timeout: must be 0 or more (got -1h0m0s)`},
	{"negative max_header_bytes", base + "    max_header_bytes: -1\n",
		`portcullis.yaml:6:23: listeners[0].max_header_bytes: must be 0 or more (got -1)`},
	{"max_conns_per_client above MaxCount", base + "    max_conns_per_client: 2147483648\n",
		`portcullis.yaml:6:27: listeners[0].max_conns_per_client: must be at most 2147483646 (got 2147483648)`},
	{"permits above MaxCount", "listeners:\n  - protocol: http\n    listen: :80\n    routes: [{upstreams: [http://a], limit: {permits: 2147483647}}]\n",
		`portcullis.yaml:4:55: listeners[0].routes[0].limit.permits: must be at most 2147483646 (got 2147483647)`},
	{"negative send_timeout", base + "    send_timeout: -1s\n",
		`portcullis.yaml:6:19: listeners[0].send_timeout: must be 0 or more (got -1s)`},
	{"negative max_concurrent_streams", "listeners:\n  - protocol: http3\n    listen: :443\n    tls: {cert_file: testdata/files/server.crt, key_file: testdata/files/server.key}\n    max_concurrent_streams: -1\n    routes: [{upstreams: [http://a]}]\n",
		`portcullis.yaml:5:29: listeners[0].max_concurrent_streams: must be 0 to 2147483647 (got -1)`},
	{"max_concurrent_streams on http", base + "    max_concurrent_streams: 10\n",
		`portcullis.yaml:6:29: listeners[0].max_concurrent_streams: only for https and http3 listeners (protocol is http)`},
	{"http listener with quic", base + "    quic: {max_in_progress: 10}\n",
		`portcullis.yaml:6:11: listeners[0].quic: only for http3 listeners (protocol is http)`},
	{"http listener with upstream", base + "    upstream: 127.0.0.1:9000\n",
		`portcullis.yaml:6:15: listeners[0].upstream: only for tcp listeners (protocol is http)`},
	{"http listener without routes", "listeners:\n  - protocol: http\n    listen: 127.0.0.1:8080\n",
		`portcullis.yaml:2:5: listeners[0].routes: at least one route is required, or routes_from`},
	{"tcp listener with routes", "listeners:\n  - protocol: tcp\n    listen: :5432\n    upstream: db:5432\n    routes: [{upstreams: [http://a]}]\n",
		`portcullis.yaml:5:13: listeners[0].routes: only for http, https and http3 listeners (protocol is tcp)`},
	{"tcp listener without upstream", "listeners:\n  - protocol: tcp\n    listen: :5432\n",
		`portcullis.yaml:2:5: listeners[0].upstream: required for tcp listeners: the host:port to proxy to`},
	{"tcp listener with read_header_timeout", "listeners:\n  - protocol: tcp\n    listen: :5432\n    upstream: db:5432\n    read_header_timeout: 5s\n",
		`portcullis.yaml:5:26: listeners[0].read_header_timeout: only for http, https and http3 listeners (protocol is tcp)`},
	{"tcp upstream without port", "listeners:\n  - protocol: tcp\n    listen: :5432\n    upstream: db\n",
		`portcullis.yaml:4:15: listeners[0].upstream: must be host:port, such as 127.0.0.1:8080 (got "db")`},
	{"http3 with syn_filter", h3("    syn_filter: true\n"),
		`portcullis.yaml:9:17: listeners[1].syn_filter: only for http, https and tcp listeners (protocol is http3)`},
	{"syn_filter with enforce_above", base + "    syn_filter: true\n    enforce_above: 10\n",
		`portcullis.yaml:6:17: listeners[0].syn_filter: cannot be combined with enforce_above: the filter drops a client at its cap at once`},
	{"syn_filter with proxy_protocol", base + "    syn_filter: true\n    trusted_proxies: [10.0.0.1]\n    proxy_protocol: true\n",
		`portcullis.yaml:6:17: listeners[0].syn_filter: cannot be combined with proxy_protocol: the peer the kernel sees is the proxy, not the client`},
	{"http3 with reset_on_refuse", h3("    reset_on_refuse: true\n"),
		`portcullis.yaml:9:22: listeners[1].reset_on_refuse: only for http, https and tcp listeners (protocol is http3)`},
	{"quic min above max", h3("    quic: {retry_threshold_min: 5000}\n"),
		`portcullis.yaml:9:33: listeners[1].quic.retry_threshold_min: must be at most retry_threshold_max (4096) (got 5000)`},
	{"quic max below min", h3("    quic: {retry_threshold_min: 300, retry_threshold_max: 200}\n"),
		`portcullis.yaml:9:59: listeners[1].quic.retry_threshold_max: must be at least retry_threshold_min (300) (got 200)`},
	{"quic max_in_progress below max", h3("    quic: {retry_threshold_min: 10, retry_threshold_max: 100, max_in_progress: 50}\n"),
		`portcullis.yaml:9:80: listeners[1].quic.max_in_progress: must be at least retry_threshold_max (100), or attempts are refused before any Retry (got 50)`},
	{"quic negative", h3("    quic: {max_in_progress: -1}\n"),
		`portcullis.yaml:9:29: listeners[1].quic.max_in_progress: must be 0 or more (got -1)`},
	{"quic token key malformed", h3("    quic: {token_key_file: testdata/files/redis.password}\n"),
		"portcullis.yaml:9:28: listeners[1].quic.token_key_file: must hold 64 hexadecimal digits (32 bytes), as `openssl rand -hex 32` writes (got \"$FILES/redis.password\")"},
	{"routes_from missing listener", strings.Replace(h3(""), "routes_from: web", "routes_from: nope", 1),
		`portcullis.yaml:10:18: listeners[1].routes_from: names no listener (got "nope")`},
	{"routes_from a tcp listener", strings.Replace(h3(""), "routes_from: web", "routes_from: db", 1) + "  - name: db\n    protocol: tcp\n    listen: :5432\n    upstream: db:5432\n",
		`portcullis.yaml:10:18: listeners[1].routes_from: names a tcp listener, which has no routes (got "db")`},
	{"routes_from itself", strings.Replace(h3(""), "routes_from: web", "routes_from: h3", 1),
		`portcullis.yaml:10:18: listeners[1].routes_from: names this listener itself (got "h3")`},
	{"routes_from a listener with a bad protocol", "listeners:\n  - name: web\n    protocol: h2c\n    listen: :80\n  - protocol: http\n    listen: :81\n    routes_from: web\n",
		`portcullis.yaml:3:15: listeners[0].protocol: must be one of http, https, tcp, http3 (got "h2c")`},
	{"routes_from a chain", strings.Replace(base, "  - protocol", "  - name: web\n    protocol", 1) +
		"  - name: b\n    protocol: http\n    listen: :81\n    routes_from: web\n" +
		"  - protocol: http\n    listen: :82\n    routes_from: b\n",
		`portcullis.yaml:13:18: listeners[2].routes_from: names a listener that itself uses routes_from; name "web" instead (got "b")`},
	{"routes_from and routes", strings.Replace(base, "  - protocol", "  - name: web\n    protocol", 1) +
		"  - protocol: http\n    listen: :81\n    routes_from: web\n    routes: [{upstreams: [http://a]}]\n",
		`portcullis.yaml:10:13: listeners[1].routes: must be empty: this listener uses the routes of "web" (routes_from)`},

	// Routes.
	{"path_prefix without slash", base + "        path_prefix: api\n",
		`portcullis.yaml:6:22: listeners[0].routes[0].path_prefix: must start with "/" (got "api")`},
	{"path_prefix not clean", base + "        path_prefix: /api/../admin\n",
		`portcullis.yaml:6:22: listeners[0].routes[0].path_prefix: must be a clean path, without "//", "." or ".." segments (got "/api/../admin")`},
	{"path_prefix with query", base + "        path_prefix: /api?x=1\n",
		`portcullis.yaml:6:22: listeners[0].routes[0].path_prefix: must not contain spaces, control characters, '?' or '#' (got "/api?x=1")`},
	{"negative upstream_timeout", base + "        upstream_timeout: -5s\n",
		`portcullis.yaml:6:27: listeners[0].routes[0].upstream_timeout: must be 0 or more (got -5s)`},
	{"no upstreams", "listeners:\n  - protocol: http\n    listen: :80\n    routes:\n      - path_prefix: /\n",
		`portcullis.yaml:5:9: listeners[0].routes[0].upstreams: at least one upstream URL is required, such as http://127.0.0.1:9000`},
	{"upstream without scheme", strings.Replace(base, "http://127.0.0.1:9000", "\"127.0.0.1:9000\"", 1),
		`portcullis.yaml:5:21: listeners[0].routes[0].upstreams[0]: must be an absolute http or https URL such as http://127.0.0.1:9000 (got "127.0.0.1:9000")`},
	{"upstream without host", strings.Replace(base, "http://127.0.0.1:9000", "\"http:///x\"", 1),
		`portcullis.yaml:5:21: listeners[0].routes[0].upstreams[0]: must name a host, as in http://127.0.0.1:9000 (got "http:///x")`},
	{"upstream ftp", strings.Replace(base, "http://127.0.0.1:9000", "ftp://a", 1),
		`portcullis.yaml:5:21: listeners[0].routes[0].upstreams[0]: scheme must be http or https (got "ftp://a")`},
	{"upstream with path", strings.Replace(base, "http://127.0.0.1:9000", "http://a/api", 1),
		`portcullis.yaml:5:21: listeners[0].routes[0].upstreams[0]: must have no path: the request path is forwarded unchanged (got "http://a/api")`},
	{"upstream with user", strings.Replace(base, "http://127.0.0.1:9000", "http://u:p@a", 1),
		`portcullis.yaml:5:21: listeners[0].routes[0].upstreams[0]: must not hold a user or password (got "http://u:p@a")`},
	{"upstream duplicate", strings.Replace(base, "http://127.0.0.1:9000", "http://a, http://a", 1),
		`portcullis.yaml:5:31: listeners[0].routes[0].upstreams[1]: duplicate upstream (also upstreams[0]) (got "http://a")`},
	{"host with port", base + "        host: [example.com:80]\n",
		`portcullis.yaml:6:16: listeners[0].routes[0].host[0]: must not include a port (got "example.com:80")`},
	{"host wildcard inside", base + "        host: [\"a.*.com\"]\n",
		`portcullis.yaml:6:16: listeners[0].routes[0].host[0]: a wildcard must be the whole first label, as in *.example.com (got "a.*.com")`},
	{"host duplicate", base + "        host: [Example.com, example.COM]\n",
		`portcullis.yaml:6:29: listeners[0].routes[0].host[1]: duplicate host (also host[0]) (got "example.COM")`},
	{"duplicate route name", base + "        name: a\n      - name: a\n        path_prefix: /x\n        upstreams: [http://b]\n",
		`portcullis.yaml:7:15: listeners[0].routes[1].name: duplicate route name "a" (also routes[0])`},
	{"unreachable route", base + "      - path_prefix: /\n        upstreams: [http://b]\n",
		`portcullis.yaml:6:22: listeners[0].routes[1].path_prefix: unreachable: routes[0] has the same host and path_prefix and comes first (got "/")`},

	// Limits.
	{"limit as a list", base + "        limit: [8]\n",
		`portcullis.yaml:6:16: listeners[0].routes[0].limit: must be a mapping of fields (got a list)`},
	{"shadow_limit as a number", base + "        shadow_limit: 8\n",
		`portcullis.yaml:6:23: listeners[0].routes[0].shadow_limit: must be a mapping of fields (got 8)`},
	{"permits below -1", base + "        limit: {permits: -3}\n",
		`portcullis.yaml:6:26: listeners[0].routes[0].limit.permits: must be -1 (unlimited) or more (got -3)`},
	{"limit key unknown", base + "        limit: {key: ip}\n",
		`portcullis.yaml:6:22: listeners[0].routes[0].limit.key: must be client_ip, user, host or header:<name> (got "ip")`},
	{"limit header key without name", base + "        limit: {key: \"header:\"}\n",
		`portcullis.yaml:6:22: listeners[0].routes[0].limit.key: header: must be followed by a header name, as in header:X-Api-Key (got "header:")`},
	{"limit header key with space", base + "        limit: {key: \"header:X Key\"}\n",
		`portcullis.yaml:6:22: listeners[0].routes[0].limit.key: header: must be followed by a header name, as in header:X-Api-Key (got "header:X Key")`},
	{"status 200", base + "        limit: {status: 200}\n",
		`portcullis.yaml:6:25: listeners[0].routes[0].limit.status: must be from 400 to 599 (got 200)`},
	{"retry_after below 1s", base + "        limit: {retry_after: 500ms}\n",
		`portcullis.yaml:6:30: listeners[0].routes[0].limit.retry_after: must be at least 1s, or none (got 500ms)`},
	{"retry_after fraction", base + "        limit: {retry_after: 1500ms}\n",
		`portcullis.yaml:6:30: listeners[0].routes[0].limit.retry_after: must be a whole number of seconds, as Retry-After counts seconds (got 1.5s)`},
	{"retry_after negative", base + "        limit: {retry_after: -5s}\n",
		`portcullis.yaml:6:30: listeners[0].routes[0].limit.retry_after: must be at least 1s, or none (got -5s)`},
	{"queue size negative", base + "        limit: {queue: {size: -1}}\n",
		`portcullis.yaml:6:31: listeners[0].routes[0].limit.queue.size: must be 0 (no queue) or more (got -1)`},
	{"queue timeout without size", base + "        limit: {queue: {timeout: 2s}}\n",
		`portcullis.yaml:6:34: listeners[0].routes[0].limit.queue.timeout: needs queue.size: with no queue nothing waits (got 2s)`},
	{"tunnel_permits below -1", base + "        limit: {tunnel_permits: -2}\n",
		`portcullis.yaml:6:33: listeners[0].routes[0].limit.tunnel_permits: must be -1 (unlimited), 0 (share permits) or more (got -2)`},
	{"override 0", base + "        limit: {key: user, overrides: {batch: 0}}\n",
		`portcullis.yaml:6:47: listeners[0].routes[0].limit.overrides["batch"]: must be -1 (unlimited) or 1 or more (got 0)`},
	{"override not an IP for client_ip", base + "        limit: {overrides: {batch: 4}}\n",
		`portcullis.yaml:6:36: listeners[0].routes[0].limit.overrides["batch"]: must be an IP address or a CIDR, since the limit counts by client_ip (got "batch")`},
	{"shadow_limit with status", base + "        shadow_limit: {permits: 2, status: 503}\n",
		`portcullis.yaml:6:44: listeners[0].routes[0].shadow_limit.status: a shadow_limit never refuses: leave status out (got 503)`},
	{"shadow_limit with queue", base + "        shadow_limit: {queue: {size: 3}}\n",
		`portcullis.yaml:6:31: listeners[0].routes[0].shadow_limit.queue: a shadow_limit never queues: leave queue out`},
	{"client_limit by user", base + "    client_limit: {key: user}\n",
		`portcullis.yaml:6:25: listeners[0].client_limit.key: a client_limit counts by client_ip only (got "user")`},
	{"client_limit on tcp", "listeners:\n  - protocol: tcp\n    listen: :5432\n    upstream: db:5432\n    client_limit: {permits: 3}\n",
		`portcullis.yaml:5:19: listeners[0].client_limit: only for http, https and http3 listeners (protocol is tcp)`},

	// Rates.
	{"rate not a rate", base + "        rate: {rate: 10 r/s}\n",
		`portcullis.yaml:6:22: listeners[0].routes[0].rate.rate: must be a rate such as 10r/s, 600r/m, 30r/h or unlimited: the number of requests must be a positive decimal integer, with no spaces or signs (got "10 r/s")`},
	{"rate zero", base + "        rate: {rate: 0r/s}\n",
		`portcullis.yaml:6:22: listeners[0].routes[0].rate.rate: must be a rate such as 10r/s, 600r/m, 30r/h or unlimited: the number of requests must be positive (got "0r/s")`},
	{"rate too fast", base + "        rate: {rate: 2000000000r/s}\n",
		`portcullis.yaml:6:22: listeners[0].routes[0].rate.rate: must be a rate such as 10r/s, 600r/m, 30r/h or unlimited: the number of requests must be at most 1000000000 (got "2000000000r/s")`},
	{"rate as a number", base + "        rate: {rate: 10}\n",
		`portcullis.yaml:6:22: listeners[0].routes[0].rate.rate: must be a rate such as 10r/s, 600r/m, 30r/h or unlimited (got 10)`},
	{"rate as a list", base + "        rate: {rate: [10r/s]}\n",
		`portcullis.yaml:6:22: listeners[0].routes[0].rate.rate: must be a rate such as 10r/s, 600r/m, 30r/h or unlimited (got a list)`},
	{"rate missing", base + "        rate: {burst: 5}\n",
		`portcullis.yaml:6:15: listeners[0].routes[0].rate.rate: required: a rate such as 10r/s, 600r/m or 30r/h`},
	{"rate block as a string", base + "        rate: 10r/s\n",
		`portcullis.yaml:6:15: listeners[0].routes[0].rate: must be a mapping of fields (got "10r/s")`},
	{"rate burst negative", base + "        rate: {rate: 10r/s, burst: -1}\n",
		`portcullis.yaml:6:36: listeners[0].routes[0].rate.burst: must be from 0 to 1073741824 (got -1)`},
	{"rate burst too long", base + "        rate: {rate: 1r/h, burst: 1000000}\n",
		`portcullis.yaml:6:35: listeners[0].routes[0].rate.burst: spans too long at 1r/h: (burst+1) intervals must stay under about 73 years (got 1000000)`},
	{"rate delay negative", base + "        rate: {rate: 10r/s, burst: 5, delay: -1}\n",
		`portcullis.yaml:6:46: listeners[0].routes[0].rate.delay: must be 0 (delay every early request) or more (got -1)`},
	{"rate delay with nodelay", base + "        rate: {rate: 10r/s, burst: 5, delay: 2, nodelay: true}\n",
		`portcullis.yaml:6:58: listeners[0].routes[0].rate.nodelay: cannot be combined with delay: nodelay lets the whole burst through at once, delay only its first 2`},
	{"rate key unknown", base + "        rate: {rate: 10r/s, key: ip}\n",
		`portcullis.yaml:6:34: listeners[0].routes[0].rate.key: must be client_ip, user, host or header:<name> (got "ip")`},
	{"rate status 200", base + "        rate: {rate: 10r/s, status: 200}\n",
		`portcullis.yaml:6:37: listeners[0].routes[0].rate.status: must be from 400 to 599 (got 200)`},
	{"rate headers unknown", base + "        rate: {rate: 10r/s, headers: sometimes}\n",
		`portcullis.yaml:6:38: listeners[0].routes[0].rate.headers: must be refusal, always or never (got "sometimes")`},
	{"rate override not a limit", base + "        rate: {rate: 10r/s, key: user, overrides: {batch: \"100r/s brust=5\"}}\n",
		`portcullis.yaml:6:59: listeners[0].routes[0].rate.overrides["batch"]: must be a rate limit such as "100r/s burst=50", "10r/s burst=20 delay=5" or "10r/s burst=20 nodelay": write burst=N, delay=N or nodelay, one space apart (got "100r/s brust=5")`},
	{"rate override not an IP for client_ip", base + "        rate: {rate: 10r/s, overrides: {batch: 100r/s}}\n",
		`portcullis.yaml:6:48: listeners[0].routes[0].rate.overrides["batch"]: must be an IP address or a CIDR, since the rate counts by client_ip (got "batch")`},
	{"rate override with host bits", base + "        rate: {rate: 10r/s, overrides: {10.1.2.3/16: 100r/s}}\n",
		`portcullis.yaml:6:54: listeners[0].routes[0].rate.overrides["10.1.2.3/16"]: has bits set after the prefix length; did you mean 10.1.0.0/16? (got "10.1.2.3/16")`},
	{"rate override null", base + "        rate: {rate: 10r/s, key: user, overrides: {batch: ~}}\n",
		`portcullis.yaml:6:59: listeners[0].routes[0].rate.overrides["batch"]: must be a valid rate limit: no rate set`},
	{"listener rate with routes_from", h3("    rate: {rate: 10r/s}\n"),
		`portcullis.yaml:9:11: listeners[1].rate: must be left out: this listener shares the routes and the rate of "web" (routes_from)`},
	{"listener rate on tcp", "listeners:\n  - protocol: tcp\n    listen: :5432\n    upstream: db:5432\n    rate: {rate: 10r/s}\n",
		`portcullis.yaml:5:11: listeners[0].rate: only for http, https and http3 listeners (protocol is tcp)`},
	{"listener rate burst", base + "    rate: {rate: 10r/s, burst: 2000000000}\n",
		`portcullis.yaml:6:32: listeners[0].rate.burst: must be from 0 to 1073741824 (got 2000000000)`},
	{"conn_rate on http3", h3("    conn_rate: {rate: 10r/s}\n"),
		`portcullis.yaml:9:16: listeners[1].conn_rate: only for http, https and tcp listeners (protocol is http3)`},
	{"conn_rate missing rate", base + "    conn_rate: {burst: 10}\n",
		`portcullis.yaml:6:16: listeners[0].conn_rate.rate: required: a rate such as 10r/s, 600r/m or 30r/h`},
	{"conn_rate burst negative", base + "    conn_rate: {rate: 10r/s, burst: -3}\n",
		`portcullis.yaml:6:37: listeners[0].conn_rate.burst: must be from 0 to 1073741824 (got -3)`},
	{"handshake_rate on https", strings.Replace(base, "protocol: http", "protocol: https", 1) + "    tls: {cert_file: testdata/files/server.crt, key_file: testdata/files/server.key}\n    handshake_rate: {rate: 5r/s}\n",
		`portcullis.yaml:7:21: listeners[0].handshake_rate: only for http3 listeners (protocol is https)`},
	{"handshake_rate bad rate", h3("    handshake_rate: {rate: fast}\n"),
		`portcullis.yaml:9:28: listeners[1].handshake_rate.rate: must be a rate such as 10r/s, 600r/m, 30r/h or unlimited (got "fast")`},
	{"local_share above 1", base + "cluster: {redis: {addrs: [\"a:1\"]}, local_share: 1.5}\n",
		`portcullis.yaml:6:49: cluster.local_share: must be from 0 (every admission asks Redis) to 1 (got 1.5)`},
	{"negative flush_interval", base + "cluster: {redis: {addrs: [\"a:1\"]}, flush_interval: -1ms}\n",
		`portcullis.yaml:6:52: cluster.flush_interval: must be 0 or more (got -1ms)`},

	// Decoding problems silence the validation errors they would cause.
	{"typo silences required", "listeners:\n  - protocol: http\n    listen: :80\n    routes:\n      - upstream: [http://a]\n",
		`portcullis.yaml:5:9: listeners[0].routes[0].upstream: unknown field; did you mean "upstreams"?`},
	{"wrong type silences required", "listeners:\n  - protocol: http\n    listen: [a]\n    routes:\n      - upstreams: [http://a]\n",
		`portcullis.yaml:3:13: listeners[0].listen: must be a string (got a list)`},
}

// webBase is base with its listener named web; its lines are 1 to 6.
var webBase = strings.Replace(base, "  - protocol", "  - name: web\n    protocol", 1)

// h3 returns webBase and an http3 listener named h3 sharing the routes of web: its name on
// line 7, its protocol on line 8, then the extra lines from line 9, then its listen,
// routes_from and tls.
func h3(extra string) string {
	return webBase + "  - name: h3\n    protocol: http3\n" + extra +
		"    listen: 127.0.0.1:8443\n    routes_from: web\n    tls: {cert_file: testdata/files/server.crt, key_file: testdata/files/server.key}\n"
}
