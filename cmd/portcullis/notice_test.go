package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Apache-2.0 section 4(d): whoever distributes a work that includes a
// module with a NOTICE file passes that NOTICE on. The binary and the image
// include every module the command links, so the repository's NOTICE must
// reproduce each of their NOTICE files.
func TestNoticeNamesEveryLinkedNotice(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("the go command is not on PATH")
		}
		t.Skip("the go command is not on PATH: cannot list the linked modules")
	}
	out, err := exec.Command(goCmd, "list", "-deps", "-f", "{{with .Module}}{{.Path}}\t{{.Dir}}{{end}}", ".").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	notice, err := os.ReadFile("../../NOTICE")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		mod, dir, ok := strings.Cut(line, "\t")
		if !ok || seen[mod] || mod == "github.com/seed-a07d1050/portcullis" {
			continue
		}
		seen[mod] = true
		theirs, err := os.ReadFile(filepath.Join(dir, "NOTICE"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(notice), "\n"+mod+"\n") {
			t.Errorf("NOTICE lacks the NOTICE of %s, which the binary links", mod)
			continue
		}
		// Its first line, at least, is reproduced.
		first, _, _ := strings.Cut(strings.TrimSpace(string(theirs)), "\n")
		if !strings.Contains(string(notice), strings.TrimSpace(first)) {
			t.Errorf("NOTICE names %s but not its text (%q)", mod, first)
		}
	}
	if len(seen) == 0 {
		t.Fatal("go list found no linked module")
	}
}
