package mcpconn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
)

// Config describes how to reach one MCP server: either a command to run
// (stdio) or a URL (streamable HTTP or SSE).
//
// Every string value except Type and Sandbox may hold ${VAR} placeholders,
// which Expand replaces. A Config is stored with its placeholders; only the
// copy used to connect carries the values.
type Config struct {
	// Command is the program of a stdio server.
	Command string `json:"command,omitempty"`
	// Args are the program's arguments.
	Args []string `json:"args,omitempty"`
	// Env is added to the stdio server's minimal environment (see Options).
	Env map[string]string `json:"env,omitempty"`
	// Cwd is the stdio server's working directory. Empty means, on the
	// host, a private folder of ipybox's (never the workspace: see
	// Options.Writable), and inside a sandbox the sandbox's default.
	Cwd string `json:"cwd,omitempty"`

	// URL is the endpoint of a remote server.
	URL string `json:"url,omitempty"`
	// Headers are sent with every HTTP request to URL.
	Headers map[string]string `json:"headers,omitempty"`

	// Type chooses the transport: "stdio", "http" (or its spellings
	// "streamable_http" and "streamableHttp") or "sse". Empty means: stdio
	// when Command is set; SSE when URL's path contains "/sse"; otherwise
	// streamable HTTP, falling back to SSE when the server rejects the
	// streamable HTTP initialize request with a 4xx status, as the MCP
	// specification's backwards-compatibility section describes.
	Type string `json:"type,omitempty"`

	// Sandbox asks for the stdio server to run sandboxed: true, or a sandbox
	// settings object. It is opaque here (no ${VAR} substitution either);
	// the sandbox package interprets it, through Options.StdioCommand.
	Sandbox json.RawMessage `json:"sandbox,omitempty"`

	// OAuth configures OAuth 2.1 for a streamable HTTP server (see
	// OAuthConfig). Nil still gets OAuth, with discovery and dynamic client
	// registration, when the server answers 401 with an OAuth challenge and
	// the config sets no Authorization header.
	OAuth *OAuthConfig `json:"oauth,omitempty"`

	// Origin says who wrote the config: empty for the operator (a config
	// file, an application through the Go API), OriginClient for an MCP
	// client of ipybox mcp (register_mcp_server). A client's config gets
	// no ${VAR} filling from the host's environment or .env, which hold the
	// operator's secrets: a placeholder in it is an error (unless
	// Options.ClientVars). ipybox mcp gates
	// a client's stdio server again at every start, under the flags of
	// that run.
	Origin string `json:"origin,omitempty"`
}

// OriginClient is Config.Origin of a config that an MCP client registered.
const OriginClient = "client"

// Transport is the resolved transport of a Config.
type Transport string

// The transports a Config can resolve to.
const (
	Stdio          Transport = "stdio"
	StreamableHTTP Transport = "streamable_http"
	SSE            Transport = "sse"
)

// typeSpellings maps every accepted Config.Type to its transport.
var typeSpellings = map[string]Transport{
	"stdio":           Stdio,
	"http":            StreamableHTTP,
	"streamable_http": StreamableHTTP,
	"streamableHttp":  StreamableHTTP,
	"sse":             SSE,
}

const acceptedTypes = `"stdio", "http", "streamable_http", "streamableHttp" or "sse"`

// ParseConfig decodes one server's JSON config and validates it. Unknown
// fields are rejected, so that a misspelt field is not silently ignored.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		// The raw JSON is not echoed: it may hold secrets.
		return Config{}, fmt.Errorf("server config: %w (fields: command, args, env, cwd, url, headers, type, sandbox, oauth, origin)", err)
	}
	if dec.More() {
		return Config{}, fmt.Errorf("server config: trailing data after the JSON object")
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Validate reports whether c describes exactly one way to reach a server.
func (c Config) Validate() error {
	if c.Origin != "" && c.Origin != OriginClient {
		return fmt.Errorf("server config %s: origin %q: want %q or nothing", c, c.Origin, OriginClient)
	}
	_, _, err := c.resolve()
	if err == nil && c.OAuth != nil {
		// What only a stored config must hold: no secret in it.
		if err := c.OAuth.validate(true); err != nil {
			return fmt.Errorf("server config %s: oauth: %v", c, err)
		}
	}
	return err
}

// Transport returns the transport c resolves to. For a URL without a type
// that is not an SSE URL, it is StreamableHTTP, even though connecting may
// fall back to SSE.
func (c Config) Transport() (Transport, error) {
	t, _, err := c.resolve()
	return t, err
}

// resolve returns the transport and whether a failed streamable HTTP
// initialize may fall back to SSE.
func (c Config) resolve() (t Transport, fallback bool, err error) {
	bad := func(format string, args ...any) (Transport, bool, error) {
		return "", false, fmt.Errorf("config %s: %s", c, fmt.Sprintf(format, args...))
	}
	hasCmd, hasURL := c.Command != "", c.URL != ""
	switch {
	case !hasCmd && !hasURL:
		return bad(`has neither "command" (a stdio server) nor "url" (a remote server); set one of them`)
	case hasCmd && hasURL:
		return bad(`has both "command" and "url"; set only one of them`)
	}
	if hasCmd {
		t = Stdio
	} else if strings.Contains(urlPath(c.URL), "/sse") {
		t = SSE
	} else {
		t, fallback = StreamableHTTP, true
	}
	if c.Type != "" {
		want, ok := typeSpellings[c.Type]
		if !ok {
			return bad("unknown type %q; use %s, or leave type out", c.Type, acceptedTypes)
		}
		if (want == Stdio) != hasCmd {
			if hasCmd {
				return bad("type %q needs \"url\", not \"command\"", c.Type)
			}
			return bad("type %q needs \"command\", not \"url\"", c.Type)
		}
		t, fallback = want, false
	}
	if hasCmd {
		if c.OAuth != nil {
			return bad(`"oauth" applies only to url servers; remove it`)
		}
		if len(c.Headers) > 0 {
			return bad(`"headers" apply only to url servers; remove them or use "url"`)
		}
	} else {
		switch {
		case len(c.Args) > 0:
			return bad(`"args" apply only to command (stdio) servers; remove them`)
		case len(c.Env) > 0:
			return bad(`"env" applies only to command (stdio) servers; use "headers" to pass values to a url server`)
		case c.Cwd != "":
			return bad(`"cwd" applies only to command (stdio) servers; remove it`)
		case len(c.Sandbox) > 0:
			return bad(`"sandbox" applies only to command (stdio) servers; remove it`)
		}
		if c.OAuth != nil {
			if t == SSE {
				return bad(`"oauth" needs the streamable HTTP transport: the MCP Go SDK's SSE client has no OAuth support; use "type": "http" if the server speaks streamable HTTP`)
			}
			// An OAuth server that rejects streamable HTTP is not tried
			// over SSE, which could not authorize.
			fallback = false
			if err := c.OAuth.validate(false); err != nil {
				return bad("oauth: %v", err)
			}
		}
		if !strings.Contains(c.URL, "${") {
			if err := checkURL(c.URL); err != nil {
				return bad("%v", err)
			}
		}
	}
	if len(c.Sandbox) > 0 {
		var v any
		if err := json.Unmarshal(c.Sandbox, &v); err != nil {
			return bad("sandbox: %v", err)
		}
		switch v.(type) {
		case bool, map[string]any, nil:
		default:
			return bad("sandbox must be true, false or a settings object, not %s", c.Sandbox)
		}
	}
	return t, fallback, nil
}

// urlPath returns the path of raw, or raw itself when it does not parse
// (for example because of a placeholder).
func urlPath(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Path
	}
	return raw
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("url: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("url %q: the scheme must be http or https", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("url %q has no host", raw)
	}
	return nil
}

// SandboxRequested reports whether c asks for a sandbox: Sandbox is true or
// an object.
func (c Config) SandboxRequested() bool {
	s := bytes.TrimSpace(c.Sandbox)
	return len(s) > 0 && !bytes.Equal(s, []byte("false")) && !bytes.Equal(s, []byte("null"))
}

// String returns c as JSON for error messages. The values of env and headers
// that carry no ${VAR} placeholder are shown as "<redacted>", because they
// may be secrets written into the config.
func (c Config) String() string {
	r := c.clone()
	for _, m := range []map[string]string{r.Env, r.Headers} {
		for k, v := range m {
			if !strings.Contains(v, "${") {
				m[k] = "<redacted>"
			}
		}
	}
	if r.OAuth != nil && r.OAuth.ClientSecret != "" && !strings.Contains(r.OAuth.ClientSecret, "${") {
		r.OAuth.ClientSecret = "<redacted>"
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Sprintf("%+v", r)
	}
	return string(b)
}

// clone returns a deep copy of c.
func (c Config) clone() Config {
	c.Args = slices.Clone(c.Args)
	c.Env = maps.Clone(c.Env)
	c.Headers = maps.Clone(c.Headers)
	c.Sandbox = slices.Clone(c.Sandbox)
	if c.OAuth != nil {
		o := *c.OAuth
		o.Scopes = slices.Clone(o.Scopes)
		c.OAuth = &o
	}
	return c
}

// MissingVarError reports a ${VAR} placeholder whose variable is not set.
type MissingVarError struct {
	// Var is the variable's name.
	Var string
	// Field is where the placeholder is, such as `url` or `headers["Authorization"]`.
	Field string
	// Client is set when the config is a client's (Origin), which gets
	// no filling.
	Client bool
}

// Error names the variable, where it is used, and the fix.
func (e *MissingVarError) Error() string {
	if e.Client {
		return fmt.Sprintf("${%s} in %s: a config that an MCP client registers (register_mcp_server) gets no ${VAR} filling from ipybox's environment or .env, which hold the operator's secrets; write the value itself, or ask the operator to add the server to --mcp-config, whose configs are filled (or to run ipybox mcp with --allow-host-servers, which trusts every client as the operator)", e.Var, e.Field)
	}
	return fmt.Sprintf("${%s} in %s is not set; set %s in the environment or in .env", e.Var, e.Field, e.Var)
}

// Expand returns a copy of c with every ${VAR} placeholder replaced by the
// value lookup gives, in command, args, env values, cwd, url and header
// values, and the OAuth client ID and secret. c itself is unchanged. A variable that lookup does not know is a
// *MissingVarError. "$VAR" without braces is kept literally, as is a "$"
// not followed by "{"; there is no escape for a literal "${".
func (c Config) Expand(lookup func(string) (string, bool)) (Config, error) {
	r, _, err := c.expand(lookup)
	return r, err
}

// expand is Expand that also returns the values it substituted, which are
// secrets to keep out of every error and log line.
func (c Config) expand(lookup func(string) (string, bool)) (Config, []string, error) {
	r := c.clone()
	var err error
	var values []string
	record := func(name string) (string, bool) {
		if c.Origin == OriginClient {
			return "", false // see Origin
		}
		v, ok := lookup(name)
		if ok && v != "" {
			values = append(values, v)
		}
		return v, ok
	}
	expand := func(field string, s *string) {
		if err != nil {
			return
		}
		*s, err = expandString(*s, field, record)
	}
	expand("command", &r.Command)
	for i := range r.Args {
		expand(fmt.Sprintf("args[%d]", i), &r.Args[i])
	}
	for _, k := range slices.Sorted(maps.Keys(r.Env)) {
		v := r.Env[k]
		expand(fmt.Sprintf("env[%q]", k), &v)
		r.Env[k] = v
	}
	expand("cwd", &r.Cwd)
	expand("url", &r.URL)
	for _, k := range slices.Sorted(maps.Keys(r.Headers)) {
		v := r.Headers[k]
		expand(fmt.Sprintf("headers[%q]", k), &v)
		r.Headers[k] = v
	}
	if r.OAuth != nil {
		expand("oauth.clientId", &r.OAuth.ClientID)
		expand("oauth.clientSecret", &r.OAuth.ClientSecret)
		expand("oauth.clientMetadataUrl", &r.OAuth.ClientMetadataURL)
	}
	if me, ok := err.(*MissingVarError); ok && c.Origin == OriginClient {
		me.Client = true
	}
	if err != nil {
		return Config{}, values, err
	}
	return r, values, nil
}

func expandString(s, field string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", fmt.Errorf("%s: %q has an unterminated ${; write ${NAME}", field, s)
		}
		name := s[i+2 : i+end]
		if !isEnvName(name) {
			return "", fmt.Errorf("%s: %q: ${%s} is not a variable name (letters, digits and _, not starting with a digit); defaults such as ${X:-y} are not supported", field, s, name)
		}
		v, ok := lookup(name)
		if !ok {
			return "", &MissingVarError{Var: name, Field: field}
		}
		b.WriteString(v)
		s = s[i+end+1:]
	}
}

func isEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
		case '0' <= r && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
