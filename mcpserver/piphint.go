package mcpserver

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// pipNetworkHint says why pip, in the sandbox, could not reach an index,
// from its output: the egress proxy refused the host (403, a policy
// decision), or could not reach it (502: no route, DNS), with the hosts
// pip tried and what to do; "" when the output shows neither.
func pipNetworkHint(out []byte) string {
	refused := bytes.Contains(out, []byte("403 Forbidden")) || bytes.Contains(out, []byte("ipybox sandbox proxy: refused"))
	failed := bytes.Contains(out, []byte("502 Bad Gateway"))
	if !refused && !failed && !looksOffline(out) {
		return ""
	}
	hosts := pipHosts(out)
	where := "the package index"
	if len(hosts) > 0 {
		where = strings.Join(hosts, ", ")
	}
	allow := "--allowed-domain (for PyPI: pypi.org and files.pythonhosted.org)"
	if len(hosts) > 0 {
		allow = "--allowed-domain " + strings.Join(hosts, " --allowed-domain ")
	}
	switch {
	case refused:
		return fmt.Sprintf("the sandbox's egress proxy refused %s (403: not an allowed domain); allow it with %s, or install from a path in the workspace", where, allow)
	case failed:
		return fmt.Sprintf("the sandbox's egress proxy could not reach %s (502 Bad Gateway: the host has no route to it, or its name does not resolve); check this machine's network, or install from a path in the workspace", where)
	}
	return fmt.Sprintf("pip could not reach %s from the sandbox: allow its domains with %s, or install from a path in the workspace", where, allow)
}

// pipHostRE finds the hosts of the URLs in pip's output.
var pipHostRE = regexp.MustCompile(`https?://([A-Za-z0-9.-]+)(?::[0-9]+)?/`)

// pipHosts returns the hosts of the URLs in pip's output, sorted, at most
// five.
func pipHosts(out []byte) []string {
	seen := map[string]bool{}
	for _, m := range pipHostRE.FindAllSubmatch(out, 100) {
		seen[strings.ToLower(string(m[1]))] = true
	}
	hosts := make([]string, 0, len(seen))
	for h := range seen {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	if len(hosts) > 5 {
		hosts = hosts[:5]
	}
	return hosts
}
