package main

import (
	"bytes"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionFromBuildInfo(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	release := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/seed-a07d1050/portcullis", Version: "v1.4.0"},
	}
	checkout := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/seed-a07d1050/portcullis", Version: "v1.4.1-0.20261202080000-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "-trimpath", Value: "true"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-12-02T08:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want []string // lines, in order
	}{
		{"go install @version", release, true, []string{
			"portcullis v1.4.0",
			"  module:   github.com/seed-a07d1050/portcullis",
			"  revision: unknown (no VCS information in this build)",
			"  go:       go1.26.8 " + platform,
		}},
		{"build from a modified checkout", checkout, true, []string{
			"portcullis v1.4.1-0.20261202080000-0123456789ab+dirty",
			"  module:   github.com/seed-a07d1050/portcullis",
			"  revision: 0123456789abcdef0123456789abcdef01234567, committed 2026-12-02T08:00:00Z, with uncommitted changes",
			"  go:       go1.26.8 " + platform,
		}},
		{"devel build", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/seed-a07d1050/portcullis", Version: "(devel)"}}, true, []string{
			"portcullis devel",
			"  module:   github.com/seed-a07d1050/portcullis",
			"  revision: unknown (no VCS information in this build)",
			"  go:       go1.26.8 " + platform,
		}},
		{"no build info", nil, false, []string{
			"portcullis devel",
			"  revision: unknown (no VCS information in this build)",
			"  go:       " + runtime.Version() + " " + platform,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			buildDetailsFrom(tt.bi, tt.ok).write(&out)
			if got, want := out.String(), strings.Join(tt.want, "\n")+"\n"; got != want {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// The command prints what this very binary carries: its Go version and
// its module path.
func TestVersionCommandReadsThisBinary(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"version"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("the test binary has no build info")
	}
	for _, want := range []string{"portcullis ", "  go:       " + bi.GoVersion + " " + runtime.GOOS + "/" + runtime.GOARCH, "  module:   " + bi.Main.Path} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("version output lacks %q:\n%s", want, out.String())
		}
	}
}
