package config

import (
	"strings"
	"testing"
)

// A file naming a retired HTTP/1.x server (lean, fast) loads as eventloop, the
// effective configuration says eventloop, and the listener carries a warning
// naming the old value and what it now means; eventloop, net/http and the
// default carry none.
func TestRetiredHTTP1ServerReadAsEventLoop(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    HTTP1Server
		warning bool
	}{
		{"lean", HTTP1ServerEventLoop, true},
		{"fast", HTTP1ServerEventLoop, true},
		{"eventloop", HTTP1ServerEventLoop, false},
		{"net/http", HTTP1ServerNetHTTP, false},
		{"", HTTP1ServerEventLoop, false},
	} {
		t.Run("value="+tc.value, func(t *testing.T) {
			text := "listeners:\n  - name: web\n    protocol: http\n    listen: 127.0.0.1:8080\n    routes: [{upstreams: [http://a]}]\n"
			if tc.value != "" {
				text += "    http1_server: " + tc.value + "\n"
			}
			c, err := Parse("p.yaml", []byte(text))
			if err != nil {
				t.Fatal(err)
			}
			eff := c.Effective()
			if got := eff.Listeners[0].HTTP1Server; got != tc.want {
				t.Errorf("effective http1_server %q, want %q", got, tc.want)
			}
			out, err := eff.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), "http1_server: "+string(tc.want)+"\n") {
				t.Errorf("marshalled effective configuration lacks http1_server: %s:\n%s", tc.want, out)
			}
			ws := eff.Warnings()
			if !tc.warning {
				if len(ws) != 0 {
					t.Errorf("warnings %v, want none", ws)
				}
				return
			}
			if len(ws) != 1 {
				t.Fatalf("warnings %v, want one", ws)
			}
			w := ws[0]
			if w.Listener != "web" || w.Setting != "http1_server" ||
				!strings.HasPrefix(w.Message, tc.value+" is no longer a mode and now means eventloop, the default") {
				t.Errorf("warning %+v", w)
			}
			// The effective configuration parses again without a warning:
			// what check prints is what the daemon runs.
			again, err := Parse("p.yaml", out)
			if err != nil {
				t.Fatal(err)
			}
			if ws := again.Effective().Warnings(); len(ws) != 0 {
				t.Errorf("the effective configuration parsed again warns: %v", ws)
			}
		})
	}
}
