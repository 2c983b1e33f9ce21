package caddyportcullis

import "fmt"

// errorf is fmt.Errorf, named so that the parsers read plainly.
func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
