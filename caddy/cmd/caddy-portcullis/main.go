// Command caddy-portcullis is Caddy with its standard modules and the
// Portcullis modules: what `xcaddy build --with
// github.com/seed-a07d1050/portcullis/caddy` builds, without xcaddy.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/seed-a07d1050/portcullis/caddy"
)

func main() {
	caddycmd.Main()
}
