package config

import (
	"reflect"
	"slices"
	"strings"
)

// listenerFieldProtocols lists the listener fields, by YAML key, that only some protocols
// use; every other field applies to every protocol. A field a listener's protocol does not
// use must be left zero. docs/config.md shows the same table; a test compares the two.
var listenerFieldProtocols = map[string][]Protocol{
	"mode":                   {ProtocolHTTP, ProtocolHTTPS},
	"tls":                    {ProtocolHTTPS, ProtocolHTTP3},
	"reset_on_refuse":        {ProtocolHTTP, ProtocolHTTPS, ProtocolTCP},
	"syn_filter":             {ProtocolHTTP, ProtocolHTTPS, ProtocolTCP},
	"forwarded_header":       {ProtocolHTTP, ProtocolHTTPS, ProtocolHTTP3},
	"proxy_protocol":         {ProtocolHTTP, ProtocolHTTPS, ProtocolTCP},
	"proxy_protocol_timeout": {ProtocolHTTP, ProtocolHTTPS, ProtocolTCP},
	"read_header_timeout":    {ProtocolHTTP, ProtocolHTTPS, ProtocolHTTP3},
	"read_timeout":           {ProtocolHTTP, ProtocolHTTPS, ProtocolHTTP3},
	"write_timeout":          {ProtocolHTTP, ProtocolHTTPS, ProtocolHTTP3},
	"idle_timeout":           {ProtocolHTTP, ProtocolHTTPS, ProtocolHTTP3},
	"max_header_bytes":       {ProtocolHTTP, ProtocolHTTPS, ProtocolHTTP3},
	"send_timeout":           {ProtocolHTTP, ProtocolHTTPS, ProtocolHTTP3},
	"http1_server":           {ProtocolHTTP, ProtocolHTTPS},
	"max_concurrent_streams": {ProtocolHTTPS, ProtocolHTTP3},
	"client_limit":           {ProtocolHTTP, ProtocolHTTPS, ProtocolHTTP3},
	"rate":                   {ProtocolHTTP, ProtocolHTTPS, ProtocolHTTP3},
	"conn_rate":              {ProtocolHTTP, ProtocolHTTPS, ProtocolTCP},
	"handshake_rate":         {ProtocolHTTP3},
	"upstream":               {ProtocolTCP},
	"tcp_idle_timeout":       {ProtocolTCP},
	"routes_from":            {ProtocolHTTP, ProtocolHTTPS, ProtocolHTTP3},
	"access_log":             {ProtocolHTTP, ProtocolHTTPS, ProtocolHTTP3},
	"request_id":             {ProtocolHTTP, ProtocolHTTPS, ProtocolHTTP3},
	"escaped_slashes":        {ProtocolHTTP, ProtocolHTTPS, ProtocolHTTP3},
	"quic":                   {ProtocolHTTP3},
	"auth":                   {ProtocolHTTP, ProtocolHTTPS, ProtocolHTTP3},
	"forward":                {ProtocolHTTP, ProtocolHTTPS},
	"routes":                 {ProtocolHTTP, ProtocolHTTPS, ProtocolHTTP3},
}

// Uses reports whether a listener of protocol p uses the listener field whose YAML key is
// field (such as "quic" or "upstream"). Fields not named in the reference's protocol table
// apply to every protocol.
func (p Protocol) Uses(field string) bool {
	protos, ok := listenerFieldProtocols[field]
	return !ok || slices.Contains(protos, p)
}

// protocolFields reports every field set on a listener whose protocol does not use it.
func (v *validator) protocolFields(l *Listener, p string) {
	lv := reflect.ValueOf(l).Elem()
	fields := fieldsOf(lv.Type())
	for _, name := range fields.names {
		if !l.Protocol.Uses(name) && !lv.Field(fields.byName[name].index).IsZero() {
			v.addf(p+"."+name, "only for %s listeners (protocol is %s)",
				protocolList(listenerFieldProtocols[name]), l.Protocol)
		}
	}
}

// protocolList writes protocols as "a, b and c".
func protocolList(protos []Protocol) string {
	s := make([]string, len(protos))
	for i, p := range protos {
		s[i] = string(p)
	}
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
