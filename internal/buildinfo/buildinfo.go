// Package buildinfo reads what the Go toolchain recorded in the running
// binary when it was built, for "portcullis version" and the daemon's
// portcullis_build_info metric.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Info is what the toolchain recorded about a build.
type Info struct {
	// Version is the main module's version: a release tag such as v1.2.0
	// for "go install ...@v1.2.0", a pseudo-version for a build from a
	// checkout, or "devel" when the toolchain recorded none.
	Version string
	// Module is the main module's path; "" when unknown.
	Module string
	// Revision and Time are the VCS commit the binary was built from and
	// its commit time (RFC 3339); "" when the build recorded none (a
	// build outside a checkout, or with -buildvcs=false).
	Revision, Time string
	// Modified reports that the checkout had uncommitted changes.
	Modified bool
	// GoVersion is the toolchain that built the binary, such as go1.26.8.
	GoVersion string
	// Platform is GOOS/GOARCH the binary runs on, which is what it was
	// built for.
	Platform string
}

// stampedVersion is a release version given at link time, for a build that
// cannot see its tag: a container build's context has no .git, so the
// toolchain records "(devel)". deploy/release and the Dockerfile set it:
//
//	go build -ldflags "-X github.com/seed-a07d1050/portcullis/internal/buildinfo.stampedVersion=v1.2.0"
var stampedVersion string

// Read returns the Info of the running binary.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	return WithStamp(From(bi, ok), stampedVersion)
}

// WithStamp returns d with the version stamped at link time, if any, in
// place of the one the toolchain recorded: the stamp is what the release
// was tagged, while the toolchain's is "devel" or a pseudo-version whenever
// the build did not see the tag.
func WithStamp(d Info, stamp string) Info {
	if stamp != "" {
		d.Version = stamp
	}
	return d
}

// From extracts the Info from bi; ok false (a binary built without module
// support) leaves only what the runtime knows.
func From(bi *debug.BuildInfo, ok bool) Info {
	d := Info{Version: "devel", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if !ok || bi == nil {
		return d
	}
	if bi.GoVersion != "" {
		d.GoVersion = bi.GoVersion
	}
	d.Module = bi.Main.Path
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		d.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			d.Revision = s.Value
		case "vcs.time":
			d.Time = s.Value
		case "vcs.modified":
			d.Modified = s.Value == "true"
		}
	}
	return d
}
