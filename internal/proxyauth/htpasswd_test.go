package proxyauth

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// mustHash returns a bcrypt hash of pass at cost with the given prefix
// ("$2a$", "$2b$" or "$2y$"): the three differ only in name.
func mustHash(t testing.TB, pass string, cost int, prefix string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(pass), cost)
	if err != nil {
		t.Fatal(err)
	}
	return prefix + string(h[4:])
}

func TestParseHtpasswdAccepts(t *testing.T) {
	a := mustHash(t, "alice-pw", bcrypt.MinCost, "$2y$")
	b := mustHash(t, "bob-pw", bcrypt.MinCost, "$2a$")
	c := mustHash(t, "carol:pw", bcrypt.MinCost+1, "$2b$")
	file := "# users of the proxy\n\n" +
		"alice:" + a + "\r\n" +
		"   # indented comment\n" +
		"bob:" + b + "  \n" + // trailing blanks after the hash are ignored
		"carol:" + c // no final newline
	u, err := ParseHtpasswd("users", []byte(file))
	if err != nil {
		t.Fatalf("ParseHtpasswd: %v", err)
	}
	if u.Len() != 3 || !u.Has("alice") || !u.Has("bob") || !u.Has("carol") || u.Has("dave") {
		t.Fatalf("users: len %d", u.Len())
	}
	set, err := newUserSet(u, [32]byte{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		user, pass string
		want       bool
	}{
		{"alice", "alice-pw", true}, // $2y$, as Apache's htpasswd -B writes
		{"bob", "bob-pw", true},
		{"carol", "carol:pw", true}, // a password may hold ':'
		{"alice", "bob-pw", false},
		{"dave", "alice-pw", false},
		{"", "", false},
	} {
		if got := set.compare(tc.user, tc.pass); got != tc.want {
			t.Errorf("compare(%q, %q) = %v, want %v", tc.user, tc.pass, got, tc.want)
		}
	}
	if u.cost != bcrypt.MinCost {
		t.Errorf("most common cost %d, want %d", u.cost, bcrypt.MinCost)
	}
}

func TestParseHtpasswdRefuses(t *testing.T) {
	good := mustHash(t, "pw", bcrypt.MinCost, "$2y$")
	tooCostly := "$2y$18$" + good[7:]
	for _, tc := range []struct {
		name, file string
		want       []string // substrings of the error
	}{
		{"apr1", "u:$apr1$abcdefgh$0123456789abcdefghijkl\n", []string{"f:1:", `user "u"`, "Apache MD5", "htpasswd -B f u"}},
		{"sha", "u:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n", []string{"f:1:", "SHA-1", "htpasswd -B"}},
		{"crypt", "u:rl0.vHJIJKUZA\n", []string{"f:1:", "DES crypt", "htpasswd -B"}},
		{"md5crypt", "u:$1$salt$hash\n", []string{"MD5-crypt"}},
		{"sha512crypt", "u:$6$salt$hash\n", []string{"SHA-512-crypt"}},
		{"plain", "u:secret\n", []string{"plain text", "htpasswd -B f u"}},
		{"2x", "u:$2x$" + good[4:] + "\n", []string{"$2x$"}},
		{"empty hash", "u:\n", []string{"the hash is empty"}},
		{"truncated", "u:" + good[:50] + "\n", []string{"50 characters"}},
		{"malformed", "u:$2y$xx" + good[6:] + "\n", []string{"malformed"}},
		{"too costly", "u:" + tooCostly + "\n", []string{"cost 18"}},
		{"no colon", "# c\nuser-without-hash\n", []string{"f:2:", "no ':'"}},
		{"empty user", ":" + good + "\n", []string{"empty user name"}},
		{"blank user", " u:" + good + "\n", []string{"blanks"}},
		{"control", "u\x01:" + good + "\n", []string{"control"}},
		{"htdigest", "u:realm:0123456789abcdef0123456789abcdef\n", []string{"htdigest"}},
		{"duplicate", "u:" + good + "\nv:" + good + "\nu:" + good + "\n", []string{"f:3:", "already defined on line 1"}},
		{"no user", "# nobody\n\n", []string{"no user"}},
		{"empty file", "", []string{"no user"}},
		{"invalid utf-8", "u\xff:" + good + "\n", []string{"UTF-8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := ParseHtpasswd("f", []byte(tc.file))
			if err == nil {
				t.Fatalf("accepted %q (%d users)", tc.file, u.Len())
			}
			if u != nil {
				t.Error("returned Users with an error")
			}
			if !errors.Is(err, ErrHtpasswd) {
				t.Errorf("error %v does not match ErrHtpasswd", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestParseHtpasswdReportsEveryProblem(t *testing.T) {
	var b strings.Builder
	for range 25 {
		b.WriteString("u:plain\n")
	}
	_, err := ParseHtpasswd("f", []byte(b.String()))
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	// The first line is a plain-text hash; the 24 others are duplicates of
	// a user that never got in, so they are plain-text hashes too.
	if n := strings.Count(msg, "plain text"); n != maxLineErrors {
		t.Errorf("%d line errors reported, want %d:\n%s", n, maxLineErrors, msg)
	}
	if !strings.Contains(msg, "15 more problems") {
		t.Errorf("no summary of the rest:\n%s", msg)
	}
}

func FuzzParseHtpasswd(f *testing.F) {
	good := mustHash(f, "pw", bcrypt.MinCost, "$2y$")
	for _, s := range []string{
		"u:" + good + "\n",
		"# c\n\nu:" + good + "\r\nv:" + good,
		"u:$apr1$x$y\n",
		"u:" + good + "\nu:" + good + "\n",
		":x\n",
		"a:b:c\n",
		"\xff\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := ParseHtpasswd("fuzz", data)
		if err != nil {
			if u != nil {
				t.Fatal("Users with an error")
			}
			if !errors.Is(err, ErrHtpasswd) {
				t.Fatalf("error %v does not match ErrHtpasswd", err)
			}
			return
		}
		if u.Len() == 0 {
			t.Fatal("no error and no user")
		}
		// What was accepted writes back to a file that parses the same.
		var b strings.Builder
		for name, h := range u.hashes {
			if name == "" || strings.ContainsAny(name, ":\n") {
				t.Fatalf("accepted user name %q", name)
			}
			if _, err := bcrypt.Cost(h); err != nil || len(h) != 60 {
				t.Fatalf("accepted hash %q for %q", h, name)
			}
			b.WriteString(name + ":" + string(h) + "\n")
		}
		again, err := ParseHtpasswd("again", []byte(b.String()))
		if err != nil || again.Len() != u.Len() {
			t.Fatalf("round trip: %v", err)
		}
	})
}
