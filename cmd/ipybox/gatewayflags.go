package main

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/safefs"
)

// gatewayFlags are the remote-kernel flags of exec and mcp.
type gatewayFlags struct {
	url        string
	tokenFile  string
	token      string // refused: see errGatewayTokenOnCommandLine
	kernelName string
	legacy     bool
	toolAddr   string
}

func (f *gatewayFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "gateway-url", "", "run the kernel on this Jupyter Server, Kernel Gateway or Enterprise Gateway `URL` (default $JUPYTER_GATEWAY_URL; see docs/scale.md)")
	fs.StringVar(&f.tokenFile, "gateway-token-file", "", "read the gateway's token from `FILE` (default $JUPYTER_GATEWAY_AUTH_TOKEN)")
	fs.StringVar(&f.token, "gateway-token", "", "refused: a `TOKEN` on the command line is visible to every local user; use --gateway-token-file")
	fs.StringVar(&f.kernelName, "gateway-kernel-name", "python3", "the kernelspec `NAME` the gateway starts")
	fs.StringVar(&f.toolAddr, "tool-server-addr", "", "serve the tool server to gateway kernels over HTTPS (a pinned self-signed certificate) on `HOST[:PORT]`, an address of this machine the kernels can reach (default: plain HTTP on 127.0.0.1, for a gateway on this machine)")
	fs.BoolVar(&f.legacy, "gateway-legacy-protocol", false, "speak the legacy JSON websocket frames without offering v1.kernel.websocket.jupyter.org")
}

var errGatewayTokenOnCommandLine = errors.New("--gateway-token puts the token on the command line, where every local user sees it (ps); " +
	"put it in a file and pass --gateway-token-file FILE, or set $JUPYTER_GATEWAY_AUTH_TOKEN")

// config returns the gateway the flags and the environment name, or nil
// for a local kernel. It removes JUPYTER_GATEWAY_AUTH_TOKEN from this
// process's environment once read, so that no child inherits it, and from
// /proc/PID/environ (takeEnv).
func (f *gatewayFlags) config(env *cliEnv) (*ipybox.GatewayConfig, error) {
	if f.token != "" {
		return nil, errGatewayTokenOnCommandLine
	}
	url := f.url
	if url == "" {
		url = env.getenv("JUPYTER_GATEWAY_URL")
	}
	envToken := takeEnv(env, "JUPYTER_GATEWAY_AUTH_TOKEN")
	if url == "" {
		if f.tokenFile != "" || f.legacy || f.kernelName != "python3" || f.toolAddr != "" {
			return nil, errors.New("--gateway-token-file, --gateway-kernel-name, --gateway-legacy-protocol and --tool-server-addr apply to a gateway; add --gateway-url URL")
		}
		return nil, nil
	}
	g := &ipybox.GatewayConfig{URL: url, Token: envToken, KernelName: f.kernelName, LegacyProtocol: f.legacy}
	if f.tokenFile != "" {
		abs, err := filepath.Abs(f.tokenFile)
		if err != nil {
			return nil, err
		}
		b, err := safefs.ReadFile(filepath.Dir(abs), filepath.Base(abs), maxTokenFile)
		if err != nil {
			return nil, fmt.Errorf("--gateway-token-file: %w", err)
		}
		if g.Token = strings.TrimSpace(string(b)); g.Token == "" {
			return nil, fmt.Errorf("--gateway-token-file %s is empty", f.tokenFile)
		}
	}
	return g, nil
}
