package proxyauth_test

import (
	"net/netip"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

func keyOf(addr string) clientkey.Key { return clientkey.FromAddr(netip.MustParseAddr(addr)) }
