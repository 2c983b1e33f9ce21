package config_test

import (
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/importcheck"
)

// module is the path every package of the project starts with.
const module = "github.com/seed-a07d1050/portcullis/"

// textOnly are the packages of the project config may import: they read text into plain
// values and import no package of the project themselves (TestConfigIsALeaf checks).
var textOnly = map[string]string{
	module + "internal/ratetext": "../ratetext",
}

// TestConfigIsALeaf fails when a non-test file of the package imports a package of the
// project other than the text readers of textOnly, or when one of those imports one:
// config parses and checks YAML into plain values, and what those values describe is built
// by the daemon (daemon.Check), so that config can be read, fuzzed and used by other
// commands without the daemon's runtime packages.
func TestConfigIsALeaf(t *testing.T) {
	importcheck.Refuse(t, ".", func(path string) bool {
		_, ok := textOnly[path]
		return strings.HasPrefix(path, module) && !ok
	})
	for _, dir := range textOnly {
		importcheck.Refuse(t, dir, func(path string) bool { return strings.HasPrefix(path, module) })
	}
}
