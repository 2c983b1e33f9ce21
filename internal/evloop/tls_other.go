//go:build !linux

package evloop

import (
	"crypto/tls"
	"net"
)

// TLSServer returns tls.Server(c, config): on this system no loop takes
// a connection over.
func TLSServer(c net.Conn, config *tls.Config) *tls.Conn { return tls.Server(c, config) }

// NewTLSListener returns tls.NewListener(inner, config): see TLSServer.
func NewTLSListener(inner net.Listener, config *tls.Config) net.Listener {
	return tls.NewListener(inner, config)
}

// TLS returns nil: no loop serves a connection on this system.
func (c *Conn) TLS() *tls.ConnectionState { return nil }
