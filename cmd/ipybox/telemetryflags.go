package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ipybox/ipybox/internal/telemetry/otlp"
	"github.com/ipybox/ipybox/mcpserver"
)

// telemetryFlags are the tracing flags of exec and mcp, and mcp's metrics
// endpoint.
type telemetryFlags struct {
	otelEndpoint string
	includeCode  bool
	metricsAddr  string // mcp only
}

func (t *telemetryFlags) register(fs *flag.FlagSet, metrics bool) {
	fs.StringVar(&t.otelEndpoint, "otel-endpoint", "", "send OpenTelemetry traces over OTLP/HTTP to the receiver at this base `URL` (spans go to URL/v1/traces; e.g. http://127.0.0.1:4318); the standard OTEL_EXPORTER_OTLP_* variables turn tracing on too")
	fs.BoolVar(&t.includeCode, "otel-include-code", false, "put each cell's code (its first 4 KiB) on the cell's span; code can hold secrets")
	if metrics {
		fs.StringVar(&t.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://`HOST:PORT`/metrics (e.g. 127.0.0.1:9464), with the same bearer token as --http")
	}
}

// tracing starts tracing when the flags or the OTEL_* variables ask for
// it: the TracerProvider (nil: off) and the function that flushes it at
// exit. The collector's credentials are then removed from the environment.
func (t *telemetryFlags) tracing(ctx context.Context, env *cliEnv, log *slog.Logger) (trace.TracerProvider, func(), error) {
	cfg := &otlp.Config{Endpoint: t.otelEndpoint, Version: strings.Fields(versionString())[1], Getenv: env.getenv}
	if !cfg.Enabled() {
		if t.includeCode {
			return nil, nil, errors.New("--otel-include-code needs tracing: --otel-endpoint, or OTEL_EXPORTER_OTLP_ENDPOINT")
		}
		return nil, func() {}, nil
	}
	tp, err := otlp.Start(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	for _, k := range otlp.SecretEnv {
		takeEnv(env, k)
	}
	return tp, func() {
		// Spans still batched go out now, within a bound: a receiver that
		// is gone must not hold the exit.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("OpenTelemetry: spans may be lost at exit", "err", err)
		}
	}, nil
}

// serveMetrics serves srv's metrics on --metrics-addr until the returned
// stop. The token is --http's: given, or generated (written to a file,
// unless --http writes it).
func (t *telemetryFlags) serveMetrics(env *cliEnv, srv *mcpserver.Server, f *mcpFlags) (stop func(), err error) {
	if t.metricsAddr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", t.metricsAddr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	var tokenFile string
	if f.generatedToken && f.httpAddr == "" {
		if tokenFile, err = writeTokenFile(env.getenv, ln.Addr(), f.authToken); err != nil {
			ln.Close()
			return nil, fmt.Errorf("writing the generated token: %w", err)
		}
		fmt.Fprintf(env.stderr, "ipybox mcp: generated a bearer token in %s; Prometheus sends \"Authorization: Bearer <its content>\" (authorization.credentials_file)\n", tokenFile)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", srv.MetricsHandler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		hs.Serve(ln)
	}()
	fmt.Fprintf(env.stderr, "ipybox mcp: serving Prometheus metrics at http://%s/metrics\n", ln.Addr())
	return func() {
		hs.Close()
		<-done // bound: Serve returns once hs is closed
		if tokenFile != "" {
			os.Remove(tokenFile)
		}
	}, nil
}
