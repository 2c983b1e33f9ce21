package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

// TestRunFlagErrorsNameTheFlag holds that a value run's flags give and the
// configuration refuses is reported as the flag, not as a path in a file.
func TestRunFlagErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"upstream scheme", []string{"--listen", "127.0.0.1:0", "--upstream", "ftp://x"}, `--upstream: scheme must be http or https (got "ftp://x")`},
		{"second upstream", []string{"--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--upstream", "ftp://y"}, `--upstream: scheme must be http or https (got "ftp://y")`},
		{"listen", []string{"--listen", "nowhere", "--upstream", "http://127.0.0.1:1"}, `--listen: must be host:port`},
		{"connection cap", []string{"--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--max-conns-per-client", "-5"}, `--max-conns-per-client: must be -1 (unlimited) or more (got -5)`},
		{"admin", []string{"--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--admin", "nowhere"}, `--admin: `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := env{stdout: &bytes.Buffer{}, stderr: &stderr}.main(append([]string{"run"}, tc.args...))
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q, want it to contain %q", stderr.String(), tc.want)
			}
			if strings.Contains(stderr.String(), "listeners[0]") {
				t.Errorf("stderr %q names a configuration path", stderr.String())
			}
		})
	}
}

func TestFlagErrorKeepsWhatNoFlagSets(t *testing.T) {
	in := &config.Error{Path: "listeners[0].routes[0].limit.permits", Msg: "must be -1 or more"}
	err := flagError(in)
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "listeners[0].routes[0].limit.permits") {
		t.Errorf("flagError(%v) = %v", in, err)
	}
}
