package config_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

// FuzzParse checks that Parse never panics, that it returns either a valid Config or an
// error wrapping ErrInvalid, and that a Config it accepts survives the round trip through
// its effective YAML.
func FuzzParse(f *testing.F) {
	for _, file := range []string{"testdata/full.yaml", "testdata/minimal.yaml", "testdata/minimal.effective.yaml"} {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, c := range badConfigs {
		f.Add([]byte(c.yaml))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The name puts relative file paths (files/server.crt) in testdata.
		c, err := config.Parse("testdata/fuzz.yaml", data)
		if err != nil {
			if c != nil {
				t.Fatalf("Parse returned a Config with error %v", err)
			}
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if line == "" {
					t.Fatalf("empty line in error %q", err)
				}
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate refuses: %v", err)
		}
		eff := c.Effective()
		out, err := eff.Marshal()
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		back, err := config.Parse("testdata/fuzz.yaml", out)
		if err != nil {
			t.Fatalf("the effective output does not parse: %v\n%s", err, out)
		}
		if !sameConfig(back, eff) {
			t.Fatalf("round trip changed the config:\n%s", out)
		}
	})
}
