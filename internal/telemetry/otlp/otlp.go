// Package otlp starts the CLI's OpenTelemetry tracing: a TracerProvider of
// the OpenTelemetry Go SDK that exports spans over OTLP/HTTP (protobuf),
// configured by --otel-endpoint or the standard OTEL_* environment
// variables. It is apart from package telemetry so that the SDK and the
// exporter are linked into the binary only: a Go program that embeds
// ipybox brings its own TracerProvider (ipybox.Options.TracerProvider).
package otlp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// SecretEnv are the variables that may hold the collector's credentials
// (headers such as Authorization). The CLI removes them from its
// environment once the exporter has read them, so that no child (an MCP
// server, pip) inherits them and no ${VAR} in a server's config expands
// them.
var SecretEnv = []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"}

// Config says how to trace.
type Config struct {
	// Endpoint is --otel-endpoint: the OTLP/HTTP receiver's base URL, as
	// OTEL_EXPORTER_OTLP_ENDPOINT takes it: spans go to <Endpoint>/v1/traces
	// (http://127.0.0.1:4318 is a local collector's). Empty means the
	// OTEL_* variables decide.
	Endpoint string
	// Version is the service.version resource attribute.
	Version string
	// Getenv reads the environment. Nil means no variables.
	Getenv func(string) string
}

// Enabled reports whether c turns tracing on: --otel-endpoint, or one of
// OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and
// OTEL_TRACES_EXPORTER=otlp, unless OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none (which only --otel-endpoint overrides).
func (c *Config) Enabled() bool {
	if c.Endpoint != "" {
		return true
	}
	get := c.getenv()
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(get("OTEL_TRACES_EXPORTER"))) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

func (c *Config) getenv() func(string) string {
	if c.Getenv == nil {
		return func(string) string { return "" }
	}
	return c.Getenv
}

// check refuses what this exporter cannot do, rather than dropping spans.
func (c *Config) check() error {
	get := c.getenv()
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--otel-endpoint %q: want the OTLP/HTTP receiver's URL, such as http://127.0.0.1:4318", c.Endpoint)
		}
	}
	if v := strings.ToLower(strings.TrimSpace(get("OTEL_TRACES_EXPORTER"))); v != "" && v != "otlp" && v != "none" {
		return fmt.Errorf("OTEL_TRACES_EXPORTER=%s: ipybox exports traces with otlp (or none)", v)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := strings.TrimSpace(get(k)); v != "" {
			if v != "http/protobuf" {
				return fmt.Errorf("%s=%s: ipybox exports OTLP over HTTP with protobuf (http/protobuf); point it at the receiver's HTTP port (4318)", k, v)
			}
			break // the signal's own setting wins
		}
	}
	return nil
}

// Start returns a TracerProvider that batches spans to the OTLP/HTTP
// receiver, and its shutdown, which flushes what is pending (bounded by
// its ctx). It connects to nothing yet: an unreachable receiver shows as
// export errors in the log, never as a failed cell.
func Start(ctx context.Context, c *Config) (*sdktrace.TracerProvider, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	var opts []otlptracehttp.Option
	if c.Endpoint != "" {
		u, _ := url.Parse(c.Endpoint) // checked
		u.Path = path.Join("/", u.Path, "v1/traces")
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	// The service's name and version first, so that OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES (read by WithFromEnv) override them.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "ipybox"), attribute.String("service.version", c.Version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		exp.Shutdown(ctx)
		return nil, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp), // OTEL_BSP_* tune it
		sdktrace.WithResource(res),
	), nil
}
