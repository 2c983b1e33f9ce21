package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/backend"
)

// In flags mode the access log is on by default, --log-format json makes
// its lines JSON, and --access-log=false writes none, over a real
// listener and backend.
func TestRunFromFlagsAccessLog(t *testing.T) {
	b, err := backend.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, tt := range []struct {
		name  string
		flags []string
		lines int // access lines expected
		json  bool
	}{
		{"default", nil, 2, false},
		{"json", []string{"--log-format", "json"}, 2, true},
		{"off", []string{"--access-log=false"}, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sig := &signals{}
			logs := &syncBuffer{}
			args := append([]string{"run", "--listen", "127.0.0.1:0", "--upstream", b.URL()}, tt.flags...)
			srv, code := startRun(t, args, sig, io.Discard, logs)
			for range 2 {
				resp, err := http.Get("http://" + srv.Addr("http").String() + "/x")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
			sig.send(syscall.SIGTERM) // the shutdown writes the lines waiting
			if c := waitCode(t, code); c != exitOK {
				t.Fatalf("exit %d", c)
			}
			n := 0
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				if tt.json {
					var fields map[string]any
					if err := json.Unmarshal([]byte(l), &fields); err != nil {
						t.Fatalf("not a JSON line: %q", l)
					}
					if fields["msg"] == "access" {
						n++
						if fields["route"] != "default" || fields["admission"] != "admitted" {
							t.Errorf("access line %v, want route default, admitted", fields)
						}
					}
				} else if strings.Contains(l, " msg=access ") {
					n++
				}
			}
			if n != tt.lines {
				t.Fatalf("%d access lines, want %d:\n%s", n, tt.lines, logs.String())
			}
		})
	}
}
