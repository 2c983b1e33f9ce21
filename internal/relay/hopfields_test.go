package relay

import (
	"math/rand/v2"
	"net/http"
	"reflect"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/httpfield"
)

// TestCutHopFieldsMatchesRemoveHopHeaders holds cutHopFields, which cuts
// the hop-by-hop fields from a response head passed on as fields, to
// removeHopHeaders, which cuts them from a header map: for hand-picked
// and 5000 generated lists, the fields left, put in a map, must be the map
// removeHopHeaders leaves.
func TestCutHopFieldsMatchesRemoveHopHeaders(t *testing.T) {
	names := []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding",
		"Upgrade", "Proxy-Authenticate", "X-A", "X-B", "Content-Type", "Content-Length", "Vary"}
	values := []string{"", "close", "keep-alive", "X-A", "x-a, X-B", "Upgrade", " x-b ,, vary", "text/plain", "5"}
	f := func(name, value string) httpfield.Field { return httpfield.Field{Name: name, Value: value} }
	cases := [][]httpfield.Field{
		{f("Content-Type", "text/plain"), f("Content-Length", "5"), f("Connection", "keep-alive"), f("Keep-Alive", "timeout=5")},
		{f("Connection", "X-A"), f("X-A", "1"), f("X-B", "2"), f("X-A", "3")},
		{f("Upgrade", "h2c"), f("Te", "trailers"), f("Vary", "Accept")},
		nil,
	}
	rng := rand.New(rand.NewPCG(7, 11))
	for range 5000 {
		var fs []httpfield.Field
		for range rng.IntN(9) {
			fs = append(fs, f(names[rng.IntN(len(names))], values[rng.IntN(len(values))]))
		}
		cases = append(cases, fs)
	}
	toMap := func(fs []httpfield.Field) http.Header {
		h := http.Header{}
		for _, f := range fs {
			h[f.Name] = append(h[f.Name], f.Value)
		}
		return h
	}
	for i, fs := range cases {
		want := toMap(fs)
		removeHopHeaders(want)
		got := toMap(CutHopFields(append([]httpfield.Field(nil), fs...)))
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d, %v:\ncutHopFields     %v\nremoveHopHeaders %v", i, fs, got, want)
		}
	}
}
