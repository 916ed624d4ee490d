package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ipybox/ipybox/internal/safefs"
	"github.com/ipybox/ipybox/kernel"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
)

// truncate keeps the head and the tail of text when it is longer than max
// characters (runes), with a marker in between that says how many
// characters were left out.
func truncate(text string, max int) string {
	n := utf8.RuneCountInString(text)
	if max <= 0 || n <= max {
		return text
	}
	head := max / 2
	tail := max - head
	omitted := n - head - tail
	// Cut at rune boundaries.
	hi := byteOffset(text, head)
	ti := byteOffset(text, n-tail)
	return fmt.Sprintf("%s\n\n[... %d characters omitted; raise max_output_chars, or print less ...]\n\n%s", text[:hi], omitted, text[ti:])
}

// byteOffset returns the byte index of the rune with index i.
func byteOffset(s string, i int) int {
	for off := range s {
		if i == 0 {
			return off
		}
		i--
	}
	return len(s)
}

// imageMIME maps a saved image's extension to its MIME type.
var imageMIME = map[string]string{".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".svg": "image/svg+xml"}

// maxImageBytes bounds one image block.
const maxImageBytes = 16 << 20

// cellResult builds the tool result of a cell: the output text (truncated),
// the image paths, then one image block per image. A Python error, a
// timeout or a dead kernel make it an error result.
func cellResult(res *ipybox.Result, err error, maxChars int, warnings []string) *mcp.CallToolResult {
	var b strings.Builder
	if res != nil && res.Restarted != nil {
		warnings = append([]string{restartedNote(res.Restarted)}, warnings...)
	}
	for _, w := range warnings {
		b.WriteString(w)
		b.WriteString("\n")
	}
	if res != nil {
		// Shell commands print through a pseudo-terminal, with CRLF.
		out := strings.TrimSuffix(strings.ReplaceAll(res.Text, "\r\n", "\n"), "\r")
		b.WriteString(truncate(out, maxChars))
	}
	var images []mcp.Content
	var notes []string
	if res != nil {
		for _, img := range res.Images {
			notes = append(notes, fmt.Sprintf("[image saved: %s]", img))
			mime, ok := imageMIME[strings.ToLower(filepath.Ext(img))]
			if !ok {
				continue
			}
			// Kernel code can write the images directory: a link put in
			// place of the file is refused, not read.
			data, rerr := safefs.ReadFile(filepath.Dir(img), filepath.Base(img), maxImageBytes)
			if rerr != nil {
				notes = append(notes, fmt.Sprintf("[image %s not attached: too large or unreadable]", img))
				continue
			}
			images = append(images, &mcp.ImageContent{Data: data, MIMEType: mime})
		}
		if res.Truncated {
			notes = append(notes, "[ipybox: the kernel did not confirm the end of the output; some output may be missing]")
		}
	}
	isErr := false
	meta := cellMeta{Warnings: warnings}
	if res != nil {
		meta.Text = truncate(strings.TrimSuffix(strings.ReplaceAll(res.Text, "\r\n", "\n"), "\r"), maxChars)
		meta.Images = res.Images
		meta.Truncated = res.Truncated
	}
	if err != nil {
		isErr = true
		meta.Error = &cellError{Kind: "error", Message: err.Error()}
		var pe *ipybox.PythonError
		switch {
		case errors.As(err, &pe):
			meta.Error.Kind, meta.Error.Name, meta.Error.Value = "python", pe.Name, pe.Value
			meta.Error.Traceback = truncate(strings.TrimRight(pe.TracebackText(), "\n"), maxChars)
			notes = append(notes, meta.Error.Traceback)
		case errors.Is(err, ipybox.ErrTimeout):
			meta.Error.Kind = "timeout"
			notes = append(notes, "[ipybox: "+err.Error()+"]")
		case errors.Is(err, ipybox.ErrKernelDied):
			meta.Error.Kind = "kernel_died"
			notes = append(notes, "[ipybox: "+err.Error()+"; the kernel's state is lost, and the next call starts a fresh kernel]")
		case errors.Is(err, context.Canceled):
			meta.Error.Kind = "cancelled"
			notes = append(notes, "[ipybox: "+err.Error()+"]")
		default:
			notes = append(notes, "[ipybox: "+err.Error()+"]")
		}
	}
	for _, n := range notes {
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteString("\n")
		}
		b.WriteString(n)
	}
	text := b.String()
	if text == "" && len(images) == 0 {
		text = "[no output]"
	}
	out := &mcp.CallToolResult{IsError: isErr, Meta: mcp.Meta{CellMetaKey: meta}}
	if text != "" {
		out.Content = append(out.Content, &mcp.TextContent{Text: text})
	}
	out.Content = append(out.Content, images...)
	return out
}

// CellMetaKey is the key, in the _meta of an execute_ipython_cell result,
// of the cell's outcome in structured form (cellMeta), for programs such as
// the Python API: the content blocks are for a model to read, and kernel
// code chooses their text ("[image saved: /etc/passwd]").
const CellMetaKey = "ipybox/cell"

// cellMeta is the structured outcome of a cell.
type cellMeta struct {
	// Text is the cell's output, truncated like the text block, without
	// ipybox's notes.
	Text      string     `json:"text"`
	Images    []string   `json:"images,omitempty"`
	Truncated bool       `json:"truncated,omitempty"`
	Warnings  []string   `json:"warnings,omitempty"`
	Error     *cellError `json:"error,omitempty"`
	// Unregistered names the servers registered at start (--mcp-config,
	// or by another session) that this session could not register, with
	// the error: the Python API fails its start on them.
	Unregistered map[string]string `json:"unregistered,omitempty"`
}

// cellError is a cell's failure. Kind is "python" (with Name, Value and
// Traceback), "timeout", "kernel_died", "cancelled" or "error".
type cellError struct {
	Kind      string `json:"kind"`
	Message   string `json:"message"`
	Name      string `json:"name,omitempty"`
	Value     string `json:"value,omitempty"`
	Traceback string `json:"traceback,omitempty"`
}

// progress sends MCP progress notifications while a cell runs: one per
// second with the elapsed time, and (at most four a second) when the cell
// prints, with its last line.
type progress struct {
	ss    *mcp.ServerSession
	token any
	start time.Time

	mu       sync.Mutex
	last     float64 // the last progress value sent; values must increase
	lastSent time.Time
	lines    int
	lastLine string

	stop chan struct{}
	done chan struct{}
}

// startProgress starts the ticker when the client gave a progress token;
// it returns nil otherwise (a nil *progress does nothing).
func startProgress(ctx context.Context, req *mcp.CallToolRequest) *progress {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return nil
	}
	p := &progress{ss: req.Session, token: token, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.send(ctx, false)
			case <-p.stop:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return p
}

// output notes printed text.
func (p *progress) output(ctx context.Context, text string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.lines += strings.Count(text, "\n")
	if l := lastLine(text); l != "" {
		p.lastLine = l
	}
	due := time.Since(p.lastSent) >= 250*time.Millisecond
	p.mu.Unlock()
	if due {
		p.send(ctx, true)
	}
}

func lastLine(text string) string {
	text = strings.TrimRight(text, "\r\n")
	if i := strings.LastIndexAny(text, "\r\n"); i >= 0 {
		text = text[i+1:]
	}
	if utf8.RuneCountInString(text) > 200 {
		text = string([]rune(text)[:200]) + "…"
	}
	return text
}

func (p *progress) send(ctx context.Context, withLine bool) {
	p.mu.Lock()
	elapsed := time.Since(p.start).Seconds()
	v := elapsed
	if v <= p.last {
		v = p.last + 0.001
	}
	p.last = v
	p.lastSent = time.Now()
	msg := fmt.Sprintf("cell running for %.0fs, %d lines of output", elapsed, p.lines)
	if withLine && p.lastLine != "" {
		msg += ": " + p.lastLine
	}
	// Sent under the lock, so that the values reach the client in order.
	defer p.mu.Unlock()
	if err := p.ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: v, Message: msg}); err != nil {
		return // the client went away; the cell's result will not reach it either
	}
}

// end stops the ticker and waits for it.
func (p *progress) end() {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.done
}

// restartedNote tells that the kernel had died since the last call.
func restartedNote(d *kernel.DiedError) string {
	return fmt.Sprintf("[ipybox: the kernel died at %s (%s); its state was lost; this cell ran in a fresh kernel]", d.At.Format("15:04:05"), d.Cause)
}
