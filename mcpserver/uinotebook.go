package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A session exports as a Jupyter notebook (nbformat 4.5): each cell of its
// history (uihistory.go) with its outputs, as export_notebook's
// structured content and as the web page's download. Text is as the
// kernel printed it: JupyterLab shows outputs as text, and HTML in its
// own sanitiser.

// notebook builds the nbformat 4 document of h's cells.
func (h *uiHistory) notebook() map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	cells := make([]any, 0, len(h.cells))
	for _, c := range h.cells {
		cells = append(cells, c.nbCellLocked())
	}
	return map[string]any{
		"nbformat": 4, "nbformat_minor": 5,
		"metadata": map[string]any{
			"kernelspec":    map[string]any{"name": "python3", "display_name": "Python 3", "language": "python"},
			"language_info": map[string]any{"name": "python"},
			"ipybox":        map[string]any{"session": h.x.id, "dropped_cells": h.dropped},
		},
		"cells": cells,
	}
}

// nbLines splits text into nbformat's list of lines, each with its
// newline.
func nbLines(s string) []string {
	out := []string{}
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// nbCellLocked is c as a notebook's code cell. Called with h.mu held.
func (c *uiCell) nbCellLocked() map[string]any {
	var count any
	if c.Count > 0 {
		count = c.Count
	}
	outs := []any{}
	for _, it := range c.Items {
		if o := it.nbOutput(count); o != nil {
			outs = append(outs, o)
		}
	}
	if c.Truncated > 0 {
		outs = append(outs, map[string]any{"output_type": "stream", "name": "stderr",
			"text": nbLines(fmt.Sprintf("[ipybox: %d bytes of output are not kept in the history]\n", c.Truncated))})
	}
	return map[string]any{
		"cell_type": "code", "id": c.ID, "execution_count": count,
		"metadata": map[string]any{"ipybox": map[string]any{"state": c.State, "start": c.Start}},
		"source":   nbLines(c.Code), "outputs": outs,
	}
}

// nbOutput is the item as a notebook output.
func (it *uiItem) nbOutput(count any) map[string]any {
	display := func(mime string, v any) map[string]any {
		return map[string]any{"output_type": "display_data", "data": map[string]any{mime: v}, "metadata": map[string]any{}}
	}
	switch it.Kind {
	case "stdout", "stderr":
		return map[string]any{"output_type": "stream", "name": it.Kind, "text": nbLines(it.Text)}
	case "result":
		return map[string]any{"output_type": "execute_result", "execution_count": count, "data": map[string]any{"text/plain": nbLines(it.Text)}, "metadata": map[string]any{}}
	case "display", "note":
		return display("text/plain", nbLines(it.Text))
	case "image":
		return display(it.Mime, it.Data)
	case "html":
		return display("text/html", nbLines(it.Text))
	case "svg":
		return display("image/svg+xml", nbLines(it.Text))
	case "error":
		tb := it.Trace
		if tb == nil {
			tb = []string{}
		}
		return map[string]any{"output_type": "error", "ename": it.Name, "evalue": it.Text, "traceback": tb}
	case "approval":
		return display("text/plain", nbLines(fmt.Sprintf("[ipybox approval: %s; %s]\n%s", it.State, it.By, it.Text)))
	}
	return nil
}

func (s *Server) uiNotebook(w http.ResponseWriter, r *http.Request, l *uiLogin) {
	h := s.ui.historyOf(l.principal, r.URL.Query().Get("session"))
	if h == nil {
		http.Error(w, "unknown session", http.StatusNotFound)
		return
	}
	done, ok := s.uiTurn(w, r, l)
	if !ok {
		return
	}
	defer done()
	w.Header().Set("Content-Type", "application/x-ipynb+json")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="ipybox-%s.ipynb"`, h.x.id))
	json.NewEncoder(w).Encode(h.notebook())
}

type exportArgs struct {
	Session string `json:"session"`
}

type exportOut struct {
	Notebook map[string]any `json:"notebook"`
	Cells    int            `json:"cells"`
}

// addExportTool adds export_notebook.
func (s *Server) addExportTool() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "export_notebook",
		Title:       "Export a session as a notebook",
		Description: `Return a session's cells, with their outputs and images, as a Jupyter notebook (nbformat 4, in structuredContent.notebook): save it as a .ipynb file to open the work in JupyterLab. The server keeps each session's last 1000 cells (16 MiB); older ones are left out and counted in the notebook's metadata.` + threadHandle,
		InputSchema: schema(`{"type": "object", "properties": {` + sessionProp + `}, "additionalProperties": false}`),
		Annotations: &mcp.ToolAnnotations{Title: "Export a session as a notebook", ReadOnlyHint: true, OpenWorldHint: boolPtr(false)},
	}, s.exportNotebookTool)
}

func (s *Server) exportNotebookTool(ctx context.Context, req *mcp.CallToolRequest, a exportArgs) (*mcp.CallToolResult, exportOut, error) {
	x, err := s.sessionOf(req, a.Session)
	if err != nil {
		return nil, exportOut{}, err
	}
	done, err := s.ui.readTurn(ctx, x.principal)
	if err != nil {
		return nil, exportOut{}, err
	}
	defer done()
	nb := s.ui.history(x).notebook()
	n := len(nb["cells"].([]any))
	return textResult("The session's %d cell(s) as a Jupyter notebook (nbformat 4) are in structuredContent.notebook; save it as a .ipynb file.", n), exportOut{Notebook: nb, Cells: n}, nil
}
