package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestWithStamp(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/seed-a07d1050/portcullis", Version: "(devel)"}}
	for _, tc := range []struct {
		name, stamp, want string
	}{
		{"no stamp keeps the toolchain's", "", "devel"},
		{"a stamp names the release", "v1.2.0", "v1.2.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := WithStamp(From(bi, true), tc.stamp).Version; got != tc.want {
				t.Errorf("Version = %q, want %q", got, tc.want)
			}
		})
	}
}
