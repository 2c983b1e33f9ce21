package config

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/seed-a07d1050/portcullis/internal/cidrlist"
)

// errEmptyAllow is the problem of an allow_file without an entry, which would refuse every
// client: more likely a file truncated while written than a wish.
var errEmptyAllow = errors.New("holds no entry, so every client would be refused (to refuse everyone, write 0.0.0.0/0 and ::/0 in a deny_file)")

// AccessLists reads DenyFile and AllowFile into the matcher the listener checks its clients
// against at accept. It returns nil and no error when neither is set. It fails when a file
// cannot be read, when a line is neither blank, a comment nor an address or CIDR (the error
// names the file and line: a *cidrlist.ParseError), or when AllowFile holds no entry; the
// error names the field.
func (l *Listener) AccessLists() (*cidrlist.Matcher, error) {
	deny, err := readListFile(l.DenyFile, false)
	if err != nil {
		return nil, fmt.Errorf("config: listener %s: deny_file: %w", l.Name, err)
	}
	allow, err := readListFile(l.AllowFile, true)
	if err != nil {
		return nil, fmt.Errorf("config: listener %s: allow_file: %w", l.Name, err)
	}
	return cidrlist.New(deny, allow), nil
}

// readListFile reads one list file; "" is no list.
func readListFile(file string, allow bool) ([]netip.Prefix, error) {
	if file == "" {
		return nil, nil
	}
	ps, err := cidrlist.ReadFile(file)
	if err == nil && allow && len(ps) == 0 {
		return nil, fmt.Errorf("%s %w", file, errEmptyAllow)
	}
	return ps, err
}

// accessLists checks deny_file and allow_file: readable, every line an address or CIDR, and
// an allow_file with at least one entry.
func (v *validator) accessLists(l *Listener, p string) {
	for _, f := range []struct {
		key, file string
		allow     bool
	}{{"deny_file", l.DenyFile, false}, {"allow_file", l.AllowFile, true}} {
		if f.file == "" {
			continue
		}
		_, err := readListFile(f.file, f.allow)
		var pe *cidrlist.ParseError
		switch {
		case err == nil:
		case errors.As(err, &pe):
			v.add(p+"."+f.key, err, err.Error())
		case errors.Is(err, errEmptyAllow):
			v.add(p+"."+f.key, nil, errEmptyAllow.Error()+quoteGot(f.file))
		default:
			v.fileProblem(p+"."+f.key, f.file, err, err.Error())
		}
	}
}
