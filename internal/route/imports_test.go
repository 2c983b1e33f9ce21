package route

import (
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/importcheck"
)

// TestImportsNeitherDaemonNorListen fails when a non-test file of the
// package imports internal/daemon or internal/listen: the daemon hands a
// listener its table (Table.Handler, Table.Byte), so that the route table
// and the listeners stay apart, and the daemon alone assembles them.
func TestImportsNeitherDaemonNorListen(t *testing.T) {
	const internal = "github.com/seed-a07d1050/portcullis/internal/"
	importcheck.Refuse(t, ".", func(path string) bool {
		for _, no := range []string{internal + "daemon", internal + "listen"} {
			if path == no || strings.HasPrefix(path, no+"/") {
				return true
			}
		}
		return false
	})
}
