package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/rls"
)

const rlsSynopsis = `rls --rules DIR [--listen ADDR] [--cluster FILE] [--metrics ADDR]
                      [--tls-cert FILE --tls-key FILE [--client-ca FILE]] [--reflection] [--check]`

// rlsCmd runs Envoy's global rate limit service (docs/envoy.md).
func (e env) rlsCmd(args []string) int {
	fs := newFlagSet("rls", rlsSynopsis)
	rules := fs.String("rules", "", "the `directory` of rule files in envoyproxy/ratelimit's format (required); reloaded on SIGHUP")
	listen := fs.String("listen", "127.0.0.1:8081", "the gRPC `address` Envoy's rate limit cluster points at")
	clusterFile := fs.String("cluster", "", "a YAML `file` with the daemon's cluster block (or the daemon's configuration): count in Redis across nodes; empty counts in this process")
	metrics := fs.String("metrics", "", "the `address` to serve Prometheus metrics on, at /metrics; empty serves none")
	cert := fs.String("tls-cert", "", "the PEM certificate `file` to serve gRPC over TLS with")
	key := fs.String("tls-key", "", "the PEM private key `file` of --tls-cert")
	clientCA := fs.String("client-ca", "", "a PEM `file` of CAs every client must present a certificate from (mTLS)")
	reflect := fs.Bool("reflection", false, "register gRPC reflection (for grpcurl)")
	check := fs.Bool("check", false, "load the rules (and --cluster), print what they hold, and exit")
	level := fs.String("log-level", "info", "the log `level`: debug, info, warn or error")
	shutdown := fs.Duration("shutdown-timeout", 10*time.Second, "how long calls in progress may take to finish on SIGTERM")
	if code := e.parseFlags(fs, args); code >= 0 {
		return code
	}
	if *rules == "" {
		fmt.Fprintln(e.stderr, "portcullis rls: --rules is required")
		return exitUsage
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(e.stderr, "portcullis rls: --log-level: %v\n", err)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: lvl}))
	cfg, err := rls.LoadDir(*rules)
	if err != nil {
		fmt.Fprintln(e.stderr, err)
		return exitUsage
	}
	var cluster *config.Cluster
	if *clusterFile != "" {
		if cluster, err = loadClusterBlock(*clusterFile); err != nil {
			fmt.Fprintln(e.stderr, err)
			return exitUsage
		}
	}
	tlsConf, err := rls.ServerTLS(rls.TLSFiles{CertFile: *cert, KeyFile: *key, ClientCAFile: *clientCA})
	if err != nil {
		fmt.Fprintf(e.stderr, "portcullis rls: %v\n", err)
		return exitUsage
	}
	if *check {
		fmt.Fprintf(e.stdout, "# %s is valid: %d rules in %d domains\n", *rules, len(cfg.Rules()), len(cfg.Domains()))
		for _, r := range cfg.Rules() {
			fmt.Fprintf(e.stdout, "%s\t%s\n", r.ID, describeRule(r))
		}
		for _, w := range cfg.Warnings() {
			fmt.Fprintf(e.stdout, "# warning: %s\n", w)
		}
		return exitOK
	}
	for _, w := range cfg.Warnings() {
		log.Warn("rls: rule file", "warning", w)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := rls.NewMetrics()
	if err := m.Register(reg); err != nil {
		fmt.Fprintf(e.stderr, "portcullis rls: metrics: %v\n", err)
		return exitFailure
	}
	var store rls.Store = rls.NewLocalStore()
	closeClient := func() error { return nil }
	if cluster != nil {
		rs, col, closeFn, err := rls.NewClusterStore(cluster, log)
		if err != nil {
			fmt.Fprintf(e.stderr, "portcullis rls: %v\n", err)
			return exitFailure
		}
		reg.MustRegister(col)
		store, closeClient = rs, closeFn
	}
	defer func() {
		_ = store.Close()
		_ = closeClient()
	}()
	svc := rls.NewService(cfg, store, m, log)
	srv, hs := rls.NewGRPCServer(svc, rls.ServerOptions{TLS: tlsConf, Reflection: *reflect})

	ln, err := rls.Listen(*listen)
	if err != nil {
		fmt.Fprintf(e.stderr, "portcullis rls: %v\n", err)
		return exitFailure
	}
	var metricsSrv *http.Server
	if *metrics != "" {
		ml, err := net.Listen("tcp", *metrics)
		if err != nil {
			_ = ln.Close()
			fmt.Fprintf(e.stderr, "portcullis rls: metrics: %v\n", err)
			return exitFailure
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = metricsSrv.Serve(ml) }()
		defer metricsSrv.Close()
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("rls: serving Envoy's rate limit service", "listen", ln.Addr().String(), "rules", *rules,
		"domains", len(cfg.Domains()), "cluster", cluster != nil, "tls", tlsConf != nil)

	sigs := make(chan os.Signal, 4)
	stop := e.notify(sigs)
	defer stop()
	for {
		select {
		case err := <-served:
			if err != nil && !errors.Is(err, net.ErrClosed) {
				fmt.Fprintf(e.stderr, "portcullis rls: %v\n", err)
				return exitFailure
			}
			return exitOK
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				reloadRules(svc, *rules, log)
				continue
			}
			log.Info("rls: shutting down", "signal", sig.String())
			ctx, cancel := context.WithTimeout(context.Background(), *shutdown)
			rls.Shutdown(ctx, srv, hs)
			cancel()
			return exitOK
		}
	}
}

// reloadRules loads the rule directory again and, if every file is valid,
// serves it; otherwise the rules in use stay and the errors are logged.
func reloadRules(svc *rls.Service, dir string, log *slog.Logger) {
	cfg, err := svc.ReloadDir(dir)
	if err != nil {
		log.Error("rls: reload failed; the previous rules stay", "error", err)
		return
	}
	for _, w := range cfg.Warnings() {
		log.Warn("rls: rule file", "warning", w)
	}
	log.Info("rls: rules reloaded", "rules", len(cfg.Rules()), "domains", len(cfg.Domains()))
}

func describeRule(r *rls.Rule) string {
	s := ""
	switch {
	case r.Unlimited:
		s = "unlimited"
	case r.Deny:
		s = "0 per " + strings.ToLower(r.Unit.String()) + ": refuses everything"
	default:
		s = fmt.Sprintf("%d per %s: %s", r.RequestsPerUnit, strings.ToLower(r.Unit.String()), r.Limit)
		if len(r.Overrides) > 0 {
			s += fmt.Sprintf(" (%d overrides)", len(r.Overrides))
		}
	}
	if r.Shadow {
		s += " shadow_mode"
	}
	if r.Name != "" {
		s += " name=" + r.Name
	}
	return s
}

// clusterFile is a file holding only the daemon's cluster block.
type clusterFile struct {
	Cluster *config.Cluster `yaml:"cluster"`
}

// loadClusterBlock reads the cluster block of file: a file holding only
// it, or a whole configuration of the daemon.
func loadClusterBlock(file string) (*config.Cluster, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("portcullis rls: --cluster: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(f, config.MaxFileSize+1))
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("portcullis rls: --cluster: %w", err)
	}
	var cf clusterFile
	pos, err := config.Decode(file, data, &cf)
	if err != nil {
		if full, ferr := config.Parse(file, data); ferr == nil {
			if full.Cluster == nil {
				return nil, fmt.Errorf("portcullis rls: --cluster: %s has no cluster block", file)
			}
			return full.Cluster, nil
		}
		return nil, err
	}
	if cf.Cluster == nil {
		return nil, fmt.Errorf("portcullis rls: --cluster: %s has no cluster block", file)
	}
	if err := config.ValidateCluster(cf.Cluster, pos); err != nil {
		return nil, err
	}
	return cf.Cluster, nil
}
