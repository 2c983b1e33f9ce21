package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// buildDetails is what "portcullis version" reports: what the Go toolchain
// recorded in the binary when it was built.
type buildDetails struct {
	// version is the main module's version: a release tag such as v1.2.0
	// for "go install ...@v1.2.0", a pseudo-version for a build from a
	// checkout, or "devel" when the toolchain recorded none.
	version string
	module  string // the main module's path; "" when unknown
	// revision and time are the VCS commit the binary was built from and
	// its commit time (RFC 3339); "" when the build recorded none (a
	// build outside a checkout, or with -buildvcs=false).
	revision, time string
	modified       bool   // the checkout had uncommitted changes
	goVersion      string // the toolchain that built the binary, such as go1.26.8
	platform       string // GOOS/GOARCH the binary runs on, which is what it was built for
}

// readBuildDetails returns the details of the running binary.
func readBuildDetails() buildDetails {
	bi, ok := debug.ReadBuildInfo()
	return buildDetailsFrom(bi, ok)
}

// buildDetailsFrom extracts the details from bi; ok false (a binary built
// without module support) leaves only what the runtime knows.
func buildDetailsFrom(bi *debug.BuildInfo, ok bool) buildDetails {
	d := buildDetails{version: "devel", goVersion: runtime.Version(), platform: runtime.GOOS + "/" + runtime.GOARCH}
	if !ok || bi == nil {
		return d
	}
	if bi.GoVersion != "" {
		d.goVersion = bi.GoVersion
	}
	d.module = bi.Main.Path
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		d.version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			d.revision = s.Value
		case "vcs.time":
			d.time = s.Value
		case "vcs.modified":
			d.modified = s.Value == "true"
		}
	}
	return d
}

// write prints the details: the first line is "portcullis VERSION", for
// scripts; the lines after it name the module, the commit and the toolchain.
func (d buildDetails) write(w io.Writer) {
	fmt.Fprintf(w, "portcullis %s\n", d.version)
	if d.module != "" {
		fmt.Fprintf(w, "  module:   %s\n", d.module)
	}
	switch {
	case d.revision == "":
		fmt.Fprintln(w, "  revision: unknown (no VCS information in this build)")
	default:
		line := d.revision
		if d.time != "" {
			line += ", committed " + d.time
		}
		if d.modified {
			line += ", with uncommitted changes"
		}
		fmt.Fprintf(w, "  revision: %s\n", line)
	}
	fmt.Fprintf(w, "  go:       %s %s\n", d.goVersion, d.platform)
}
