package daemon

import (
	"net/http"

	"github.com/seed-a07d1050/portcullis/internal/bytepath"
)

// byteListener returns the byte path's view of f: the byte path's part
// of the route table f serves now (route.Table.Byte), read for each
// request.
func byteListener(f *front) bytepath.Listener {
	return bytepath.Listener{
		Table:  func() *bytepath.Table { return f.table.Load().Byte() },
		AltSvc: &f.altSvc,
		Active: &f.active,
		Log:    f.log,
	}
}

// testHookLoopPanic, when set, is the PanicHook of the event loops of the
// listeners bound from now on, for the tests of what a panic in a loop's
// exchange gives back.
var testHookLoopPanic func(step string, r *http.Request)
