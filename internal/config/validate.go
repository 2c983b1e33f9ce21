package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
)

// Validate checks c and returns nil when the daemon can run with it, or every problem found,
// in the form [Parse] describes, each wrapping ErrInvalid. It reads (never writes) the files
// c names: certificates and keys must load, a CA file must hold certificates, a password
// file must be non-empty and a token key file well-formed; the other files (deny and allow
// lists, htpasswd files, the interception CA and upstream roots) must be readable, and what
// they hold is checked by the daemon's build pass (daemon.Check), as are intercept rules and
// target_host overrides. Validate does not modify c.
// A nil Config is invalid.
func (c *Config) Validate() error {
	if c == nil {
		return &Error{Msg: "no configuration (nil *Config)"}
	}
	return c.problems().join()
}

// validator collects the problems of one Config.
type validator struct {
	errorList
}

func (c *Config) problems() *errorList {
	v := &validator{errorList{src: c.src}}
	v.config(c)
	return &v.errorList
}

// written reports whether a value was written at path in the YAML text: not left out and
// not null.
func (v *validator) written(path string) bool {
	if v.src == nil {
		return false
	}
	_, ok := v.src.pos[path]
	return ok && !v.src.nulls[path]
}

func (v *validator) config(c *Config) {
	v.log(&c.Log)
	if c.Admin.Listen != "" {
		v.hostPort("admin.listen", c.Admin.Listen, true)
	}
	v.adminToken(&c.Admin)
	v.nonNegativeDuration("shutdown_timeout", c.ShutdownTimeout)
	if c.Cluster != nil {
		v.cluster(c.Cluster)
	}
	if len(c.Listeners) == 0 {
		v.addf("listeners", "at least one listener is required")
	}
	for i := range c.Listeners {
		v.listener(&c.Listeners[i], indexPath("listeners", i))
	}
	v.listenerNames(c)
	v.listenAddresses(c)
	if c.Cluster != nil && !c.Cluster.LocalConnectionCaps {
		for i := range c.Listeners {
			if c.Listeners[i].SYNFilter {
				v.addf(indexPath("listeners", i)+".syn_filter",
					"cannot be combined with cluster-wide connection caps: the kernel sees only this node's counts (set cluster.local_connection_caps)")
			}
		}
	}
}

func (v *validator) log(l *Log) {
	switch l.Format {
	case "", LogText, LogJSON:
	default:
		v.addf("log.format", "must be text or json (got %q)", l.Format)
	}
	switch l.Level {
	case "", LevelDebug, LevelInfo, LevelWarn, LevelError:
	default:
		v.addf("log.level", "must be one of debug, info, warn, error (got %q)", l.Level)
	}
}

func (v *validator) cluster(c *Cluster) {
	v.redis(&c.Redis)
	if c.Lease != 0 && c.Lease < time.Second {
		v.addf("cluster.lease", "must be at least 1s (got %s)", c.Lease)
	}
	lease := orDefault(c.Lease, DefaultLease)
	switch {
	case c.Timeout < 0:
		v.addf("cluster.timeout", "must be 0 or more (got %s)", c.Timeout)
	case orDefault(c.Timeout, c.defaultTimeout()) >= lease && lease >= time.Second:
		v.addf("cluster.timeout", "must be shorter than lease (%s) (got %s)", lease, orDefault(c.Timeout, c.defaultTimeout()))
	}
	switch c.OnError {
	case "", OnErrorOpen, OnErrorClosed:
	default:
		v.addf("cluster.on_error", "must be open or closed (got %q)", c.OnError)
	}
	if c.ReleaseHold < 0 || c.ReleaseHold > lease/3 {
		v.addf("cluster.release_hold", "must be from 0 to lease/3 (%s) (got %s)", lease/3, c.ReleaseHold)
	}
	if math.IsNaN(c.SpareShare) || (c.SpareShare < 0 && c.SpareShare != -1) || c.SpareShare > 1 {
		v.addf("cluster.spare_share", "must be from 0 to 1, 0 meaning %g, or -1 for none (got %g)", DefaultSpareShare, c.SpareShare)
	}
	if math.IsNaN(c.NodeShare) || c.NodeShare < 0 || c.NodeShare > 1 {
		v.addf("cluster.node_share", "must be from 0 to 1, 0 meaning 1 (got %g)", c.NodeShare)
	}
	v.clusterRates(c)
}

func (v *validator) redis(r *Redis) {
	const p = "cluster.redis"
	switch {
	case len(r.Addrs) == 0 && len(r.SentinelAddrs) == 0:
		v.addf(p+".addrs", "at least one host:port is required (or sentinel_addrs with master_name)")
	case len(r.Addrs) > 0 && len(r.SentinelAddrs) > 0:
		v.addf(p+".sentinel_addrs", "set addrs (a server or a Redis Cluster) or sentinel_addrs (Sentinels), not both")
	}
	v.redisAddrs(p, "addrs", r.Addrs)
	v.redisAddrs(p, "sentinel_addrs", r.SentinelAddrs)
	switch {
	case len(r.SentinelAddrs) > 0 && r.MasterName == "":
		v.addf(p+".master_name", "required with sentinel_addrs: the name of the master the Sentinels watch")
	case len(r.SentinelAddrs) == 0 && r.MasterName != "":
		v.addf(p+".master_name", "needs sentinel_addrs (got %q)", r.MasterName)
	case strings.ContainsAny(r.MasterName, " \t\r\n"):
		v.addf(p+".master_name", "must not contain white space (got %q)", r.MasterName)
	}
	if r.SentinelPasswordFile != "" {
		if len(r.SentinelAddrs) == 0 {
			v.addf(p+".sentinel_password_file", "needs sentinel_addrs (got %q)", r.SentinelPasswordFile)
		} else if _, err := r.SentinelPassword(); err != nil {
			v.fileProblem(p+".sentinel_password_file", r.SentinelPasswordFile, err, "is empty")
		}
	}
	switch {
	case r.DB < 0:
		v.addf(p+".db", "must be 0 or more (got %d)", r.DB)
	case r.DB != 0 && len(r.Addrs) > 1:
		v.addf(p+".db", "must be 0 with several addrs: a Redis Cluster has database 0 only (got %d)", r.DB)
	}
	if r.PasswordFile != "" {
		if _, err := r.Password(); err != nil {
			v.fileProblem(p+".password_file", r.PasswordFile, err, "is empty")
		}
	}
	v.redisTLS(&r.TLS)
}

// redisAddrs checks the list of Redis (or Sentinel) addresses named name
// in the block at p.
func (v *validator) redisAddrs(p, name string, addrs []string) {
	seen := make(map[string]int)
	for i, a := range addrs {
		ap := indexPath(p+"."+name, i)
		if j, dup := seen[a]; dup {
			v.addf(ap, "duplicate address (also %s[%d]) (got %q)", name, j, a)
			continue
		}
		seen[a] = i
		v.hostPort(ap, a, false)
	}
}

func (v *validator) redisTLS(t *RedisTLS) {
	const p = "cluster.redis.tls"
	if !t.Enabled {
		for _, f := range []struct{ key, val string }{
			{"ca_file", t.CAFile}, {"server_name", t.ServerName}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile},
		} {
			if f.val != "" {
				v.addf(p+"."+f.key, "set but tls.enabled is false, so Redis would be reached in plain text (got %q)", f.val)
			}
		}
		return
	}
	if t.ServerName != "" && !isHostname(t.ServerName) {
		if _, err := netip.ParseAddr(t.ServerName); err != nil {
			v.addf(p+".server_name", "must be a host name or an IP address (got %q)", t.ServerName)
		}
	}
	if t.CAFile != "" {
		if pem, err := os.ReadFile(t.CAFile); err != nil {
			v.add(p+".ca_file", err, readProblem(err)+quoteGot(t.CAFile))
		} else if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			v.addf(p+".ca_file", "holds no PEM certificate (got %q)", t.CAFile)
		}
	}
	switch {
	case t.CertFile == "" && t.KeyFile != "":
		v.addf(p+".cert_file", "required with key_file")
	case t.CertFile != "" && t.KeyFile == "":
		v.addf(p+".key_file", "required with cert_file")
	case t.CertFile != "":
		v.keyPair(p, t.CertFile, t.KeyFile)
	}
}

// keyPair checks that certFile and keyFile, fields of the block at p, load together.
func (v *validator) keyPair(p, certFile, keyFile string) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		v.add(p+".cert_file", err, readProblem(err)+quoteGot(certFile))
	}
	keyPEM, kerr := os.ReadFile(keyFile)
	if kerr != nil {
		v.add(p+".key_file", kerr, readProblem(kerr)+quoteGot(keyFile))
	}
	if err != nil || kerr != nil {
		return
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		v.add(p+".cert_file", err, "does not load with key_file: "+
			strings.TrimPrefix(err.Error(), "tls: ")+quoteGot(certFile))
	}
}

// fileProblem reports a file named by the configuration that cannot be used: unreadable,
// or else described by otherwise.
func (v *validator) fileProblem(path, file string, err error, otherwise string) {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		v.add(path, err, readProblem(err)+quoteGot(file))
		return
	}
	v.add(path, nil, otherwise+quoteGot(file))
}

func quoteGot(s string) string { return " (got " + strconv.Quote(s) + ")" }

func (v *validator) hostPort(path, s string, listen bool) {
	if err := checkHostPort(s, listen); err != nil {
		v.addf(path, "%v (got %q)", err, s)
	}
}

func (v *validator) nonNegativeDuration(path string, d time.Duration) {
	if d < 0 {
		v.addf(path, "must be 0 or more (got %s)", d)
	}
}

// listenerNames checks that effective listener names are unique and that each routes_from
// names a listener that has routes of its own.
func (v *validator) listenerNames(c *Config) {
	byName := make(map[string]int)
	for i := range c.Listeners {
		l := &c.Listeners[i]
		name := orDefault(l.Name, defaultListenerName(l.Protocol, i))
		if j, dup := byName[name]; dup {
			v.addf(indexPath("listeners", i)+".name", "duplicate listener name %q (also listeners[%d])", name, j)
			continue
		}
		byName[name] = i
	}
	for i := range c.Listeners {
		l := &c.Listeners[i]
		if l.RoutesFrom == "" || !l.Protocol.IsHTTP() {
			continue
		}
		p := indexPath("listeners", i) + ".routes_from"
		if l.ClientLimit != nil {
			v.addf(indexPath("listeners", i)+".client_limit",
				"a listener with routes_from shares the route table, client limit included, of %q: set client_limit there", l.RoutesFrom)
		}
		j, ok := byName[l.RoutesFrom]
		switch {
		case !ok:
			v.addf(p, "names no listener (got %q)", l.RoutesFrom)
		case j == i:
			v.addf(p, "names this listener itself (got %q)", l.RoutesFrom)
		case !c.Listeners[j].Protocol.IsValid():
			// Its protocol is reported already; what it would share is unknown.
		case !c.Listeners[j].Protocol.IsHTTP():
			v.addf(p, "names a %s listener, which has no routes (got %q)", c.Listeners[j].Protocol, l.RoutesFrom)
		case c.Listeners[j].IsForward():
			v.addf(p, "names a forward listener, which has no routes (got %q)", l.RoutesFrom)
		case c.Listeners[j].RoutesFrom != "":
			v.addf(p, "names a listener that itself uses routes_from; name %q instead (got %q)",
				c.Listeners[j].RoutesFrom, l.RoutesFrom)
		}
	}
}

// listenAddresses checks that no two sockets of one network (TCP or UDP) share an address.
// Port 0 is skipped: every such socket gets its own free port.
func (v *validator) listenAddresses(c *Config) {
	used := make(map[string]string)
	claim := func(network, addr, owner string) {
		key, ok := socketKey(network, addr)
		if !ok {
			return
		}
		if first, dup := used[key]; dup {
			v.addf(owner, "already used by %s (got %q)", first, addr)
			return
		}
		used[key] = owner
	}
	if c.Admin.Listen != "" {
		claim("tcp", c.Admin.Listen, "admin.listen")
	}
	for i := range c.Listeners {
		l := &c.Listeners[i]
		if l.Protocol.IsValid() {
			claim(l.Protocol.Network(), l.Listen, indexPath("listeners", i)+".listen")
		}
	}
}

// socketKey normalizes a valid listen address with a non-zero port for comparison.
func socketKey(network, addr string) (string, bool) {
	if checkHostPort(addr, true) != nil {
		return "", false
	}
	host, port, _ := net.SplitHostPort(addr)
	if port == "0" || strings.Trim(port, "0") == "" {
		return "", false
	}
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.String()
	}
	return network + " " + strings.ToLower(host) + " " + strings.TrimLeft(port, "0"), true
}
