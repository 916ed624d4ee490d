// Package docker is a small client of the Docker Engine API: the dozen
// calls the container backend makes (ping, image inspect, create, start,
// kill, wait, logs, remove, list), over the daemon's unix socket or plain
// TCP, with encoding/json and net/http.
//
// The official client (github.com/docker/docker/client, now moby/moby)
// would bring the moby module tree, its API types and a dozen indirect
// modules (OpenTelemetry, containerd's errdefs, go-connections…) for
// these few calls; the wire format they use has been stable since API
// 1.25. Requests use unversioned paths, which the daemon serves at its
// own API version, so that neither an old daemon (Debian's 20.10, API
// 1.41) nor a new one (which drops old versions) refuses them.
package docker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// DefaultHost is the daemon's address when DOCKER_HOST is not set.
const DefaultHost = "unix:///var/run/docker.sock"

// ErrNotFound is returned (wrapped) for a container or an image the daemon
// does not know.
var ErrNotFound = errors.New("not found")

// Client talks to one Docker daemon.
type Client struct {
	hc   *http.Client
	base string // "http://docker" for a unix socket, "http://host:port" for TCP
	host string
}

// New returns a client of the daemon at host ("unix:///path" or
// "tcp://host:port"). Empty means $DOCKER_HOST, then DefaultHost. TLS
// (DOCKER_TLS_VERIFY, https) and ssh:// are refused with a clear error.
func New(host string) (*Client, error) {
	if host == "" {
		host = os.Getenv("DOCKER_HOST")
	}
	if host == "" {
		host = DefaultHost
	}
	tr := &http.Transport{MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second, DisableCompression: true}
	c := &Client{hc: &http.Client{Transport: tr}, host: host}
	scheme, rest, ok := strings.Cut(host, "://")
	if !ok {
		return nil, fmt.Errorf("docker host %q: want unix:///path/to/docker.sock or tcp://HOST:PORT", host)
	}
	switch scheme {
	case "unix":
		if rest == "" || !strings.HasPrefix(rest, "/") {
			return nil, fmt.Errorf("docker host %q: want an absolute socket path, as in unix:///var/run/docker.sock", host)
		}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", rest)
		}
		c.base = "http://docker"
	case "tcp":
		if os.Getenv("DOCKER_TLS_VERIFY") != "" {
			return nil, fmt.Errorf("docker host %q with DOCKER_TLS_VERIFY: TLS to the daemon is not supported; use its unix socket, or forward it (ssh -L) to a local socket", host)
		}
		if _, _, err := net.SplitHostPort(rest); err != nil {
			return nil, fmt.Errorf("docker host %q: want tcp://HOST:PORT", host)
		}
		c.base = "http://" + rest
	default:
		return nil, fmt.Errorf("docker host %q: scheme %s is not supported; use unix:// or tcp://", host, scheme)
	}
	return c, nil
}

// Host returns the daemon's address.
func (c *Client) Host() string { return c.host }

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// APIError is an error answer of the daemon.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("docker: %s (HTTP %d)", e.Message, e.Status) }

// Unwrap maps 404 to ErrNotFound.
func (e *APIError) Unwrap() error {
	if e.Status == http.StatusNotFound {
		return ErrNotFound
	}
	return nil
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("docker daemon at %s: %w", c.host, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var m struct{ Message string }
		if json.Unmarshal(b, &m) != nil || m.Message == "" {
			m.Message = strings.TrimSpace(string(b))
		}
		return nil, &APIError{Status: resp.StatusCode, Message: m.Message}
	}
	if out == nil {
		return resp, nil
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(out); err != nil {
		return nil, fmt.Errorf("docker: %s %s: decode: %w", method, path, err)
	}
	return resp, nil
}

func (c *Client) call(ctx context.Context, method, path string, q url.Values, in, out any) error {
	resp, err := c.do(ctx, method, path, q, in, out)
	if err != nil {
		return err
	}
	if out == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
	}
	return nil
}

// Ping checks that the daemon answers.
func (c *Client) Ping(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, "/_ping", nil, nil, nil)
}

// Image is what ImageInspect reports.
type Image struct {
	ID     string
	Config struct {
		User   string
		Labels map[string]string
	}
}

// ImageInspect returns the local image ref; ErrNotFound when it is not
// there (the backend never pulls).
func (c *Client) ImageInspect(ctx context.Context, ref string) (*Image, error) {
	var img Image
	if err := c.call(ctx, http.MethodGet, "/images/"+url.PathEscape(ref)+"/json", nil, nil, &img); err != nil {
		return nil, err
	}
	return &img, nil
}

// Mount is one entry of HostConfig.Mounts.
type Mount struct {
	Type         string        `json:"Type"` // "bind" or "tmpfs"
	Source       string        `json:"Source,omitempty"`
	Target       string        `json:"Target"`
	ReadOnly     bool          `json:"ReadOnly,omitempty"`
	BindOptions  *BindOptions  `json:"BindOptions,omitempty"`
	TmpfsOptions *TmpfsOptions `json:"TmpfsOptions,omitempty"`
}

// BindOptions of a bind Mount.
type BindOptions struct {
	Propagation string `json:"Propagation,omitempty"`
}

// TmpfsOptions of a tmpfs Mount.
type TmpfsOptions struct {
	SizeBytes int64  `json:"SizeBytes,omitempty"`
	Mode      uint32 `json:"Mode,omitempty"`
}

// HostConfig is the part of the container's host configuration the
// backend sets.
type HostConfig struct {
	Mounts         []Mount           `json:"Mounts,omitempty"`
	Tmpfs          map[string]string `json:"Tmpfs,omitempty"`
	NetworkMode    string            `json:"NetworkMode,omitempty"`
	CapDrop        []string          `json:"CapDrop,omitempty"`
	SecurityOpt    []string          `json:"SecurityOpt,omitempty"`
	ReadonlyRootfs bool              `json:"ReadonlyRootfs"`
	Memory         int64             `json:"Memory,omitempty"`
	MemorySwap     int64             `json:"MemorySwap,omitempty"`
	PidsLimit      *int64            `json:"PidsLimit,omitempty"`
	Init           *bool             `json:"Init,omitempty"`
	IpcMode        string            `json:"IpcMode,omitempty"`
	Privileged     bool              `json:"Privileged"`
	Ulimits        []Ulimit          `json:"Ulimits,omitempty"`
}

// Ulimit is one resource limit of a container's processes ("fsize"...).
type Ulimit struct {
	Name string `json:"Name"`
	Soft int64  `json:"Soft"`
	Hard int64  `json:"Hard"`
}

// CreateConfig is the body of a container create.
type CreateConfig struct {
	Image           string            `json:"Image"`
	Cmd             []string          `json:"Cmd"`
	Entrypoint      []string          `json:"Entrypoint"`
	Env             []string          `json:"Env"`
	User            string            `json:"User,omitempty"`
	WorkingDir      string            `json:"WorkingDir,omitempty"`
	Labels          map[string]string `json:"Labels,omitempty"`
	NetworkDisabled bool              `json:"NetworkDisabled,omitempty"`
	AttachStdout    bool              `json:"AttachStdout"`
	AttachStderr    bool              `json:"AttachStderr"`
	HostConfig      HostConfig        `json:"HostConfig"`
}

// Create creates a container (not started) and returns its id.
func (c *Client) Create(ctx context.Context, name string, cfg *CreateConfig) (string, error) {
	q := url.Values{}
	if name != "" {
		q.Set("name", name)
	}
	var out struct{ Id string }
	if err := c.call(ctx, http.MethodPost, "/containers/create", q, cfg, &out); err != nil {
		return "", err
	}
	return out.Id, nil
}

// Start starts a created container.
func (c *Client) Start(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodPost, "/containers/"+url.PathEscape(id)+"/start", nil, nil, nil)
}

// Kill sends signal (a name such as "SIGINT", or empty for SIGKILL) to the
// container's first process. A container that is not running gives an
// *APIError with status 409.
func (c *Client) Kill(ctx context.Context, id, signal string) error {
	q := url.Values{}
	if signal != "" {
		q.Set("signal", signal)
	}
	return c.call(ctx, http.MethodPost, "/containers/"+url.PathEscape(id)+"/kill", q, nil, nil)
}

// Wait waits until the container is not running and returns its exit code.
func (c *Client) Wait(ctx context.Context, id string) (int, error) {
	var out struct {
		StatusCode int
		Error      *struct{ Message string }
	}
	q := url.Values{"condition": {"not-running"}}
	if err := c.call(ctx, http.MethodPost, "/containers/"+url.PathEscape(id)+"/wait", q, nil, &out); err != nil {
		return -1, err
	}
	if out.Error != nil && out.Error.Message != "" {
		return out.StatusCode, errors.New("docker: wait: " + out.Error.Message)
	}
	return out.StatusCode, nil
}

// Remove removes a container, killing it first when force is set. A
// container that is already gone is not an error.
func (c *Client) Remove(ctx context.Context, id string, force bool) error {
	q := url.Values{"v": {"1"}}
	if force {
		q.Set("force", "1")
	}
	err := c.call(ctx, http.MethodDelete, "/containers/"+url.PathEscape(id), q, nil, nil)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusConflict && strings.Contains(ae.Message, "already in progress") {
		return nil
	}
	return err
}

// Container is an entry of List.
type Container struct {
	ID     string `json:"Id"`
	Names  []string
	Image  string
	State  string
	Labels map[string]string
}

// List lists all containers (running or not) that carry label ("KEY" or
// "KEY=VALUE").
func (c *Client) List(ctx context.Context, label string) ([]Container, error) {
	f, _ := json.Marshal(map[string][]string{"label": {label}})
	q := url.Values{"all": {"1"}, "filters": {string(f)}}
	var out []Container
	if err := c.call(ctx, http.MethodGet, "/containers/json", q, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Inspected is the part of a container's inspection the backend reads.
type Inspected struct {
	ID    string `json:"Id"`
	State struct {
		Status    string
		Running   bool
		Pid       int
		ExitCode  int
		OOMKilled bool
	}
	Config     CreateConfig
	HostConfig HostConfig
}

// Inspect returns a container's state and configuration.
func (c *Client) Inspect(ctx context.Context, id string) (*Inspected, error) {
	var out Inspected
	if err := c.call(ctx, http.MethodGet, "/containers/"+url.PathEscape(id)+"/json", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Logs streams the container's output, from its start, until it stops (or
// ctx ends): stdout frames to stdout and stderr frames to stderr (the
// multiplexed format of a container without a TTY).
func (c *Client) Logs(ctx context.Context, id string, stdout, stderr io.Writer) error {
	q := url.Values{"follow": {"1"}, "stdout": {"1"}, "stderr": {"1"}}
	resp, err := c.do(ctx, http.MethodGet, "/containers/"+url.PathEscape(id)+"/logs", q, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return Demux(resp.Body, stdout, stderr)
}

// Demux copies the multiplexed stream r (8-byte frame headers: stream,
// 0, 0, 0, big-endian length) to stdout and stderr. Nil writers discard.
func Demux(r io.Reader, stdout, stderr io.Writer) error {
	br := bufio.NewReader(r)
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		n := int64(binary.BigEndian.Uint32(hdr[4:]))
		w := io.Discard
		switch hdr[0] {
		case 1:
			if stdout != nil {
				w = stdout
			}
		case 2:
			if stderr != nil {
				w = stderr
			}
		}
		if _, err := io.CopyN(w, br, n); err != nil {
			return err
		}
	}
}
