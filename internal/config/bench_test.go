package config_test

import (
	"os"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

// BenchmarkParse measures Parse (strict decoding, positions, validation) beside the
// baseline of plain yaml.Unmarshal into the same struct, on the minimal example; and Parse
// of the full example, which also loads its certificates and keys.
func BenchmarkParse(b *testing.B) {
	minimal, err := os.ReadFile("testdata/minimal.yaml")
	if err != nil {
		b.Fatal(err)
	}
	full, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("baseline-yaml.Unmarshal/minimal", func(b *testing.B) {
		for b.Loop() {
			var c config.Config
			if err := yaml.Unmarshal(minimal, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Parse/minimal", func(b *testing.B) {
		for b.Loop() {
			if _, err := config.Parse("testdata/minimal.yaml", minimal); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Parse/full", func(b *testing.B) {
		for b.Loop() {
			if _, err := config.Parse("testdata/full.yaml", full); err != nil {
				b.Fatal(err)
			}
		}
	})
}
