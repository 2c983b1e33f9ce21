package main

import (
	"errors"
	"strings"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

// flagOfPath names the flag that set each field of the configuration that
// run's flags build (runFlags.config), so that a value the configuration
// refuses is reported as the flag the user typed, not as a path in a file
// they never wrote. Longer paths come first: the first prefix that matches
// names the flag.
var flagOfPath = []struct{ path, flag string }{
	{"listeners[0].routes[0].upstreams", "--upstream"},
	{"listeners[0].listen", "--listen"},
	{"listeners[0].max_conns_per_client", "--max-conns-per-client"},
	{"listeners[0].syn_filter", "--syn-filter"},
	{"listeners[0].trusted_proxies", "--trusted-proxy"},
	{"listeners[0].client_limit", "--max-concurrent-per-client"},
	{"listeners[0].conn_rate", "--max-conn-rate-per-client"},
	{"listeners[0].rate", "--max-rate-per-client"},
	{"listeners[0].deny_file", "--deny-file"},
	{"listeners[0].allow_file", "--allow-file"},
	{"listeners[0].auth", "--htpasswd"},
	{"listeners[0].forward.destinations.allow", "--forward-allow"},
	{"listeners[0].forward.intercept", "--intercept-ca"},
	{"admin.listen", "--admin"},
	{"admin.token_file", "--admin-token-file"},
	{"log.format", "--log-format"},
}

// flagError rewrites the problems in err, a configuration's validation
// error, to name run's flags. A problem in a field no flag sets is left as
// it is. The result still wraps config.ErrInvalid.
func flagError(err error) error {
	problems := []error{err}
	if _, one := err.(*config.Error); !one {
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			problems = joined.Unwrap()
		}
	}
	out := make([]error, len(problems))
	for i, p := range problems {
		out[i] = flagProblem(p)
	}
	return errors.Join(out...)
}

// flagProblem is flagError for one problem: "--upstream: scheme must be
// http or https (got ...)".
func flagProblem(err error) error {
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Path == "" {
		return err
	}
	for _, m := range flagOfPath {
		rest, ok := strings.CutPrefix(ce.Path, m.path)
		if !ok || (rest != "" && rest[0] != '.' && rest[0] != '[') {
			continue
		}
		// The message ends with the value the flag gave, "(got X)", which
		// tells a repeated flag's instances apart.
		return &flagProblemError{msg: m.flag + ": " + ce.Msg, err: ce}
	}
	return err
}

// flagProblemError is a configuration problem told as the flag that caused
// it; it wraps the *config.Error (and so config.ErrInvalid).
type flagProblemError struct {
	msg string
	err error
}

func (e *flagProblemError) Error() string { return e.msg }
func (e *flagProblemError) Unwrap() error { return e.err }
