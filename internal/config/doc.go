// Package config holds the YAML schema of the portcullis daemon: the types the daemon is
// built from, their defaults, strict decoding and validation with file:line:col errors, and
// the encoder that prints a configuration with every default filled in (`portcullis check`).
//
// The life of a configuration:
//
//	cfg, err := config.Load("portcullis.yaml") // decode strictly, then Validate
//	if err != nil { ... }                       // every problem, one per line, wrapping ErrInvalid
//	eff := cfg.Effective()                      // a copy with every default filled in
//	out, _ := eff.Marshal()                     // YAML that Parse reads back to the same eff
//
// The types are plain structs whose zero values mean "the default", as each field's comment
// states; a Config built in Go instead of parsed is checked with [Config.Validate] the same
// way (its errors then carry no line numbers). Nothing in this package mutates a Config it
// is given: [Config.Effective] and [Config.Validate] work on copies.
//
// The package is a leaf: of the project it imports only internal/ratetext, which reads
// nginx's rate words for package rate too and imports nothing, and its values are plain (a
// rate is a [RateValue], a port range a [PortRange]). It checks what it can alone:
// types, bounds, names, and that each file named can be read. What a file holds (a deny_file's
// lines, an htpasswd file's hashes, the interception CA), the intercept rules and target
// patterns are checked where they are built, by the daemon's daemon.Check, which start,
// reload and `portcullis check` run after Validate; it reports through [Problems], so that its
// errors too read file:line:col: path: problem.
//
// The reference for operators, with every field, type, default and the meaning of zero and
// negative values, is docs/config.md; a test keeps it in step with these types.
package config
