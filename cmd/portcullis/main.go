// Command portcullis is an admission-controlling reverse proxy: it caps the
// connections of each client at accept, limits concurrent exchanges per
// route, and forwards the rest to the upstreams. Run "portcullis help" for
// its commands.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
