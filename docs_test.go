package ipybox_test

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

var pythonBlock = regexp.MustCompile("(?s)```python\n(.*?)```")

// TestDocsPythonExamples runs every Python example of docs/tools.md in a
// kernel with server-everything registered, as the doc describes.
func TestDocsPythonExamples(t *testing.T) {
	t.Parallel()
	bin := testenv.NPMBin(t, "mcp-server-everything")
	doc, err := os.ReadFile("docs/tools.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := pythonBlock.FindAllStringSubmatch(string(doc), -1)
	if len(blocks) < 4 {
		t.Fatalf("found %d python examples in docs/tools.md", len(blocks))
	}
	// The fourth example shows the error path: the application rejects it.
	ex := start(t, &ipybox.Options{Approver: func(_ context.Context, r *ipybox.ApprovalRequest) error {
		if r.Args["message"] == "maybe" {
			return errors.New("not this one")
		}
		return nil
	}})
	register(t, ex, "everything", ipybox.ServerConfig{Command: bin, Args: []string{"stdio"}})
	want := []string{"hello", "Result float", "1 image/png", "not run: ApprovalRejectedError"}
	for i, b := range blocks {
		res := run(t, ex, b[1])
		if i < len(want) && !strings.Contains(res.Text, want[i]) {
			t.Errorf("example %d printed %q, want it to contain %q:\n%s", i+1, res.Text, want[i], b[1])
		}
	}
}
