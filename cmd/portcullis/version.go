package main

import (
	"fmt"
	"io"
	"runtime/debug"

	"github.com/seed-a07d1050/portcullis/internal/buildinfo"
)

// buildDetails is what "portcullis version" reports: what the Go toolchain
// recorded in the binary when it was built (see package buildinfo, which
// the daemon's portcullis_build_info metric reads too).
type buildDetails struct{ buildinfo.Info }

// readBuildDetails returns the details of the running binary.
func readBuildDetails() buildDetails { return buildDetails{buildinfo.Read()} }

// buildDetailsFrom extracts the details from bi; ok false (a binary built
// without module support) leaves only what the runtime knows.
func buildDetailsFrom(bi *debug.BuildInfo, ok bool) buildDetails {
	return buildDetails{buildinfo.From(bi, ok)}
}

// write prints the details: the first line is "portcullis VERSION", for
// scripts; the lines after it name the module, the commit and the toolchain.
func (d buildDetails) write(w io.Writer) {
	fmt.Fprintf(w, "portcullis %s\n", d.Version)
	if d.Module != "" {
		fmt.Fprintf(w, "  module:   %s\n", d.Module)
	}
	switch {
	case d.Revision == "":
		fmt.Fprintln(w, "  revision: unknown (no VCS information in this build)")
	default:
		line := d.Revision
		if d.Time != "" {
			line += ", committed " + d.Time
		}
		if d.Modified {
			line += ", with uncommitted changes"
		}
		fmt.Fprintf(w, "  revision: %s\n", line)
	}
	fmt.Fprintf(w, "  go:       %s %s\n", d.GoVersion, d.Platform)
}
