package mcpserver

import "testing"

// TestDiscoverDeclaresWhatIsAnswered: the go-sdk answers prompts/list,
// resources/list and resources/templates/list; server/discover and
// initialize declare them (the conformance suite's
// sep-2575-server-declares-prompts-in-discover), at both revisions.
func TestDiscoverDeclaresWhatIsAnswered(t *testing.T) {
	t.Parallel()
	srv := newServer(t, &Options{Workspace: t.TempDir()})
	for _, v := range []string{newVersion, legacyVersion} {
		cs := connectAt(t, srv, v, nil)
		caps := cs.InitializeResult().Capabilities
		//lint:ignore SA1019 the cells' output streams as MCP log messages, which SEP-2577 keeps working through its deprecation window (see streamOutput)
		if caps.Prompts == nil || caps.Resources == nil || caps.Tools == nil || caps.Logging == nil {
			t.Errorf("%s: capabilities %+v; want prompts, resources, tools and logging", v, caps)
		}
		if _, err := cs.ListPrompts(t.Context(), nil); err != nil {
			t.Errorf("%s: prompts/list: %v", v, err)
		}
		if _, err := cs.ListResourceTemplates(t.Context(), nil); err != nil {
			t.Errorf("%s: resources/templates/list: %v", v, err)
		}
	}
}
