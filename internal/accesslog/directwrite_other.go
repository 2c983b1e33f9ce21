//go:build !linux

package accesslog

import "io"

// directWriter writes the access log directly on Linux only (see
// directwrite_linux.go); elsewhere batches go through the writer.
type directWriter struct{ io.Writer }

func newDirectWriter(io.Writer) *directWriter { return nil }
