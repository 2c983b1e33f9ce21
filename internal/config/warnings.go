package config

import (
	"net"
	"net/netip"
)

// A Warning is a setting that is valid but unsafe, or whose effect an operator may not
// expect: the daemon logs each at WARN when it starts and on every reload, `portcullis
// check` prints them, and the live page shows them beside their listener.
type Warning struct {
	Listener string // the listener's name
	Setting  string // the setting that opens or closes what the warning is about, as a path
	Message  string
}

func (w Warning) String() string {
	return "listener " + w.Listener + ": " + w.Setting + ": " + w.Message
}

// Warnings returns the warnings of every listener of c, in order. c should be effective
// (see [Config.Effective]), so that every listener has its name.
func (c *Config) Warnings() []Warning {
	var out []Warning
	for i := range c.Listeners {
		out = append(out, c.Listeners[i].Warnings()...)
	}
	return out
}

// Warnings returns the warnings of l: an http1_server that names a retired server (lean
// or fast), read as eventloop; a forward listener bound beyond loopback that serves
// loopback and private clients only, or any client without auth or allow_file; an
// interception that does not verify its targets' certificates.
func (l *Listener) Warnings() []Warning {
	var out []Warning
	add := func(setting, msg string) {
		out = append(out, Warning{Listener: l.Name, Setting: setting, Message: msg})
	}
	if l.retiredHTTP1 != "" {
		add("http1_server",
			string(l.retiredHTTP1)+" is no longer a mode and now means eventloop, the default: the daemon's own HTTP/1.1 server, "+
				"relaying the plainest exchanges as bytes (on event loops for plain connections on Linux, in Go's poller otherwise) "+
				"and serving the rest with its Go server; remove the setting, or set net/http for Go's net/http server")
	}
	if !l.IsForward() {
		return out
	}
	if !IsLoopbackListen(l.Listen) {
		switch {
		case l.IsLocalClientsOnly():
			add("forward.allow_public_clients",
				"the listener is bound beyond loopback ("+l.Listen+") with neither auth nor allow_file: it serves clients on loopback and private networks only "+
					"and answers others 403; add auth or allow_file, or set forward.allow_public_clients: true, to serve them")
		case l.IsOpenRelay():
			add("forward.allow_public_clients",
				"true with neither auth nor allow_file on a listener bound beyond loopback ("+l.Listen+"): anyone who reaches it may relay through it; "+
					"remove it, or add auth or allow_file, to close it")
		}
	}
	if l.Forward != nil && l.Forward.Intercept != nil && l.Forward.Intercept.Upstream.InsecureSkipVerifyUpstream {
		add("forward.intercept.upstream.insecure_skip_verify_upstream",
			"true: the certificates of intercepted targets are not verified, and clients that trust the interception CA are told "+
				"that servers nobody authenticated are genuine; for tests only")
	}
	return out
}

// IsLoopbackListen reports whether a listen address host:port binds loopback only: a
// loopback IP address or "localhost". An empty host (every interface), any other address
// and any other name are not loopback.
func IsLoopbackListen(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
