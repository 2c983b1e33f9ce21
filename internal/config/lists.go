package config

import "os"

// accessLists checks that deny_file and allow_file can be read. What their lines hold (an
// address or CIDR each, at least one entry in an allow_file) is checked where the lists are
// built, by the daemon's prepare step, which `portcullis check` runs too.
func (v *validator) accessLists(l *Listener, p string) {
	for _, f := range []struct{ key, file string }{{"deny_file", l.DenyFile}, {"allow_file", l.AllowFile}} {
		if f.file != "" {
			v.readable(p+"."+f.key, f.file)
		}
	}
}

// readable reports, at path, a file named by the configuration that cannot be read.
func (v *validator) readable(path, file string) bool {
	if _, err := os.ReadFile(file); err != nil {
		v.fileProblem(path, file, err, err.Error())
		return false
	}
	return true
}
