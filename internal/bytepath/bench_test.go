package bytepath

import (
	"net/http"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/httppath"
	"github.com/seed-a07d1050/portcullis/internal/relay"
)

// BenchmarkLeanRequest measures relay.IsLeanRequest, which every request
// the lean path and the event loops are offered goes through (Table.take), on a path of the
// common shape (no '%', no '\\'): it must allocate nothing.
func BenchmarkLeanRequest(b *testing.B) {
	r, err := http.NewRequest(http.MethodGet, "http://app.test/api/v1/users/42/profile?x=1", nil)
	if err != nil {
		b.Fatal(err)
	}
	r.RequestURI = r.URL.RequestURI()
	b.ReportAllocs()
	for b.Loop() {
		if !relay.IsLeanRequest(r, httppath.RejectSlashes) {
			b.Fatal("not lean")
		}
	}
}
