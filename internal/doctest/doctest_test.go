package doctest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Sample is checked against the declaration written below.
type Sample struct {
	Good     int
	Missing  int
	Vague    int
	internal int
}

const sampleSource = `package doctest

type Sample struct {
	// Good is a count. Zero means 8.
	Good int
	Missing int
	// Vague is a count.
	Vague int
	internal int
}
`

// recorder collects the failures ZeroValuesDocumented reports.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Errorf(f string, a ...any) { r.errs = append(r.errs, f) }

func TestZeroValuesDocumented(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sample.go")
	if err := os.WriteFile(file, []byte(sampleSource), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &recorder{TB: t}
	ZeroValuesDocumented(r, file, reflect.TypeFor[Sample]())
	got := strings.Join(r.errs, "\n")
	if len(r.errs) != 2 || !strings.Contains(got, "has no doc comment") || !strings.Contains(got, "does not say what its zero value means") {
		t.Fatalf("reported %q, want one missing and one vague field", r.errs)
	}
	_ = Sample{}.internal
}
