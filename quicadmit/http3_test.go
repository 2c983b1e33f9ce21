package quicadmit

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

var _ http3.QUICListener = (*Listener)(nil)

// TestHTTP3Server serves HTTP/3 through a Controller's early listener,
// below the threshold and under Retry.
func TestHTTP3Server(t *testing.T) {
	cases := []struct {
		name      string
		cfg       Config
		wantRetry bool
	}{
		{"below the threshold", Config{}, false},
		{"under Retry", Config{RetryThresholdMin: Zero, RetryThresholdMax: Zero}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctrl, err := New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			tr := &quic.Transport{Conn: udp}
			defer tr.Close()
			srvTLS, cliTLS := DemoTLS()
			srvTLS.NextProtos = nil
			ln, err := ctrl.ListenEarly(tr, http3.ConfigureTLSConfig(srvTLS), &quic.Config{Allow0RTT: true})
			if err != nil {
				t.Fatal(err)
			}
			srv := &http3.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, "hello")
			})}
			served := make(chan error, 1)
			go func() { served <- srv.ServeListener(ln) }()
			defer func() {
				_ = srv.Close()
				_ = ln.Close()
				<-served
			}()

			cliTLS.NextProtos = []string{http3.NextProtoH3}
			rt := &http3.Transport{TLSClientConfig: cliTLS}
			defer rt.Close()
			resp, err := (&http.Client{Transport: rt, Timeout: 5 * time.Second}).Get("https://" + ln.Addr().String() + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(body) != "hello" {
				t.Fatalf("%s %q", resp.Status, body)
			}
			waitfor.Within(t, 5*time.Second, "completion", func() bool { return ctrl.Snapshot().Completed == 1 })
			if snap := ctrl.Snapshot(); (snap.Retried > 0) != tc.wantRetry || snap.InProgress != 0 {
				t.Fatalf("snapshot %+v", snap)
			}
		})
	}
}
