package jupyter

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"

	"github.com/ipybox/ipybox/internal/safefs"
)

// ConnectionInfo is the content of a kernel connection file.
type ConnectionInfo struct {
	Transport       string `json:"transport"`
	IP              string `json:"ip"`
	ShellPort       int    `json:"shell_port"`
	IOPubPort       int    `json:"iopub_port"`
	StdinPort       int    `json:"stdin_port"`
	ControlPort     int    `json:"control_port"`
	HBPort          int    `json:"hb_port"`
	Key             string `json:"key"`
	SignatureScheme string `json:"signature_scheme"`
	KernelName      string `json:"kernel_name"`
}

// NewIPCConnection returns connection info for the ipc transport with the
// socket files under dir. ZeroMQ names an ipc endpoint "<ip>-<port>", so the
// "ports" are just distinct suffixes. dir must be short: a unix socket path
// is limited to 107 bytes.
func NewIPCConnection(dir string) (*ConnectionInfo, error) {
	base := filepath.Join(dir, "k")
	if len(base)+3 > 107 {
		return nil, fmt.Errorf("jupyter: run directory %q is too long for unix socket paths (max ~100 bytes); choose a shorter one", dir)
	}
	return newConnection("ipc", base, [5]int{1, 2, 3, 4, 5})
}

// NewTCPConnection returns connection info for the tcp transport on
// 127.0.0.1, for systems without ipc sockets (Windows). It picks five
// free ports, as jupyter_client does: another process may take one before
// the kernel binds it, and the kernel then fails to start (the caller may
// retry). Unlike ipc sockets in a private directory, the ports are open to
// every local user: the key, which signs every message, keeps them from
// running code, but any local process can subscribe to iopub and read the
// kernel's output.
func NewTCPConnection() (*ConnectionInfo, error) {
	var ports [5]int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for i := range ports {
		// Held open until all five are chosen, so that they differ.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("jupyter: choose a port on 127.0.0.1: %w", err)
		}
		lns = append(lns, ln)
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return newConnection("tcp", "127.0.0.1", ports)
}

// newConnection returns connection info with a fresh random key; ports are
// shell, iopub, stdin, control and heartbeat.
func newConnection(transport, ip string, ports [5]int) (*ConnectionInfo, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return &ConnectionInfo{
		Transport: transport, IP: ip,
		ShellPort: ports[0], IOPubPort: ports[1], StdinPort: ports[2], ControlPort: ports[3], HBPort: ports[4],
		Key:             hex.EncodeToString(key),
		SignatureScheme: "hmac-sha256",
		KernelName:      "python3",
	}, nil
}

// Endpoint returns the ZeroMQ endpoint for port.
func (c *ConnectionInfo) Endpoint(port int) string {
	if c.Transport == "ipc" {
		return fmt.Sprintf("ipc://%s-%d", c.IP, port)
	}
	return fmt.Sprintf("%s://%s:%d", c.Transport, c.IP, port)
}

// Write stores the connection file at path with mode 0600 (it holds the
// key). It replaces whatever is at path, a link included, without following
// it: the kernel can write its run directory when it is not sandboxed.
func (c *ConnectionInfo) Write(path string) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return safefs.WriteFile(filepath.Dir(path), filepath.Base(path), b, 0o600)
}
