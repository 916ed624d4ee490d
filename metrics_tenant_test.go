package ipybox_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
)

// TestMetricsHideClientServers attacks the fresh attack round's break F:
// /metrics takes any principal's token, and its tool-call counts were
// labelled with every server's name, so bob read the names of the servers
// alice registered. Where principals are tenants, a client's server is
// counted under one label; the operator's servers keep their names.
func TestMetricsHideClientServers(t *testing.T) {
	t.Parallel()
	bin := testmcpStdio(t).Command
	ex := start(t, &ipybox.Options{NoToolApproval: true, Principal: "alice", Tenant: true})
	register(t, ex, "opsrv", ipybox.ServerConfig{Command: bin})
	register(t, ex, "alicesecretsrv", ipybox.ServerConfig{Command: bin, Origin: "client"})
	run(t, ex, "from mcptools.opsrv import tool_1 as a\nfrom mcptools.alicesecretsrv import tool_1 as b\na.run(a.Params(s='x'))\nb.run(b.Params(s='x'))\nprint('ok')")
	rec := httptest.NewRecorder()
	ipybox.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	text := string(body)
	if strings.Contains(text, "alicesecretsrv") {
		t.Error("the metrics name a server that a client registered")
	}
	for _, want := range []string{`server="opsrv"`, `server="(registered by a client)"`} {
		if !strings.Contains(text, want) {
			t.Errorf("the metrics lack %s", want)
		}
	}
}
