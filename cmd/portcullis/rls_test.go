package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The example rules pass "portcullis rls --check", as CI runs it.
func TestExamplesRLSCheck(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"rls", "--rules", filepath.Join(examplesDir, "envoy", "config"),
		"--cluster", filepath.Join(examplesDir, "envoy", "cluster.yaml"), "--check"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d\n%s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "is valid") || !strings.Contains(out.String(), "edge_proxy.remote_address\t10 per second") {
		t.Errorf("check printed:\n%s", out.String())
	}
	if code := run([]string{"rls"}, io.Discard, io.Discard); code != exitUsage {
		t.Errorf("rls without --rules: exit %d", code)
	}
}

// A bad cluster block is reported at its line, as the daemon reports it;
// the daemon's own configuration file is accepted for its cluster block.
func TestRLSClusterFile(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(bad, []byte("cluster:\n  redis: {addrs: [\"127.0.0.1:6379\"]}\n  on_error: maybe\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	rules := filepath.Join(examplesDir, "envoy", "config")
	if code := run([]string{"rls", "--rules", rules, "--cluster", bad, "--check"}, io.Discard, &errOut); code != exitUsage ||
		!strings.Contains(errOut.String(), "c.yaml:3:13: cluster.on_error: must be open or closed") {
		t.Errorf("exit %d: %s", code, errOut.String())
	}
	if code := run([]string{"rls", "--rules", rules, "--cluster", filepath.Join(examplesDir, "cluster.yaml"), "--check"}, io.Discard, &errOut); code != exitOK {
		t.Errorf("the daemon's cluster example: exit %d: %s", code, errOut.String())
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// portcullis rls serves, reloads its rules on SIGHUP all or nothing, and
// stops on SIGTERM.
func TestRLSCommandReload(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	write := func(n int) {
		t.Helper()
		body := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: " + itoa(n) + "}\n"
		if err := os.WriteFile(rules, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(2)
	addr, maddr := freeAddr(t), freeAddr(t)
	sig := &signals{}
	logs := &syncBuffer{}
	e := env{stdout: io.Discard, stderr: logs, notify: sig.notify}
	code := make(chan int, 1)
	go func() { code <- e.main([]string{"rls", "--rules", dir, "--listen", addr, "--metrics", maddr}) }()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewRateLimitServiceClient(conn)
	limitOf := func() uint32 {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		r, err := client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "d",
			Descriptors: []*rlpb.RateLimitDescriptor{{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}, grpc.WaitForReady(true))
		if err != nil {
			t.Fatal(err)
		}
		return r.Statuses[0].CurrentLimit.GetRequestsPerUnit()
	}
	if got := limitOf(); got != 2 {
		t.Fatalf("limit %d, want 2", got)
	}
	if err := os.WriteFile(rules, []byte("domain: d\ndescriptors: [{key: k, rate_limit: {unit: aeon}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sig.send(syscall.SIGHUP)
	if !waitFor(func() bool { return strings.Contains(logs.String(), "reload failed") }) {
		t.Fatalf("no reload failure logged:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "rules.yaml:2:43: descriptors[0].rate_limit.unit") {
		t.Errorf("the reload error does not say where:\n%s", logs.String())
	}
	if got := limitOf(); got != 2 {
		t.Fatalf("after a bad reload, limit %d, want the old 2", got)
	}
	write(7)
	sig.send(syscall.SIGHUP)
	if !waitFor(func() bool { return limitOf() == 7 }) {
		t.Fatal("the good reload did not take")
	}
	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`portcullis_rls_config_loads_total{result="error"} 1`, `portcullis_rls_config_loads_total{result="ok"} 2`,
		`portcullis_rls_requests_total{code="ok",domain="d"}`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	sig.send(syscall.SIGTERM)
	if c := waitCode(t, code); c != exitOK {
		t.Fatalf("exit %d\n%s", c, logs.String())
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
