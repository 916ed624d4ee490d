package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ipybox/ipybox/internal/safefs"

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
//
// chunks is how many chunks of output the cell sent as progress
// notifications, for the structured form.
func cellResult(res *ipybox.Result, err error, maxChars int, warnings []string, chunks int) *mcp.CallToolResult {
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
	meta := cellMeta{Warnings: warnings, Chunks: chunks}
	if res != nil {
		meta.Text = truncate(strings.TrimSuffix(strings.ReplaceAll(res.Text, "\r\n", "\n"), "\r"), maxChars)
		meta.Images = res.Images
		meta.Truncated = res.Truncated
		if d := res.Restarted; d != nil {
			meta.Restarted = &restartedMeta{Cause: d.Cause}
			if !d.At.IsZero() {
				meta.Restarted.At = d.At.UTC().Format(time.RFC3339Nano)
			}
		}
	}
	if err != nil {
		isErr = true
		meta.Error = &cellError{Kind: "error", Message: err.Error()}
		var pe *ipybox.PythonError
		var ie *interruptedError
		switch {
		case errors.As(err, &ie):
			// A cancelled call's cell keeps the kind clients know.
			meta.Error.Kind = "interrupted"
			if ie.why == byCancel {
				meta.Error.Kind = "cancelled"
			}
			meta.Error.Restarted = ie.restarted
			notes = append(notes, "[ipybox: "+err.Error()+"]")
		case errors.As(err, &pe):
			meta.Error.Kind, meta.Error.Name, meta.Error.Value = "python", pe.Name, pe.Value
			meta.Error.Traceback = truncate(strings.TrimRight(pe.TracebackText(), "\n"), maxChars)
			notes = append(notes, meta.Error.Traceback)
		case errors.Is(err, ipybox.ErrTimeout):
			meta.Error.Kind = "timeout"
			var te *ipybox.TimeoutError
			meta.Error.Restarted = errors.As(err, &te) && te.Restarted
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
	// Restarted says that the kernel had died since the last call, and
	// this cell ran in a fresh one (a warning says so too).
	Restarted *restartedMeta `json:"restarted,omitempty"`
	// Chunks is how many chunks of output the cell sent as progress
	// notifications, to all the requests of its rounds: a client whose
	// notifications may reach it after the result (the go-sdk hands them
	// over on their own) waits for that many.
	Chunks int `json:"chunks,omitempty"`
	// Cell names the cell of a "still running" or "busy" answer, and
	// Running says it still runs; Pending are the approval questions it
	// waits on (cells.go).
	Cell    string   `json:"cell,omitempty"`
	Running bool     `json:"running,omitempty"`
	Pending []string `json:"pending,omitempty"`
	// Unregistered names the servers registered at start (--mcp-config,
	// or by another session) that this session could not register, with
	// the error: the Python API fails its start on them.
	Unregistered map[string]string `json:"unregistered,omitempty"`
}

// restartedMeta is when (RFC 3339, if known) and why the kernel died.
type restartedMeta struct {
	At    string `json:"at,omitempty"`
	Cause string `json:"cause"`
}

// cellError is a cell's failure. Kind is "python" (with Name, Value and
// Traceback), "timeout", "kernel_died", "cancelled" (the call was
// cancelled), "interrupted" (the interrupt tool), "busy" (cells.go) or
// "error".
type cellError struct {
	Kind      string `json:"kind"`
	Message   string `json:"message"`
	Name      string `json:"name,omitempty"`
	Value     string `json:"value,omitempty"`
	Traceback string `json:"traceback,omitempty"`
	// Restarted, for a timeout or an interrupt: the cell ignored the
	// interrupt, so the kernel was restarted and its state is lost.
	Restarted bool `json:"restarted,omitempty"`
}

// streamMetaKey is the key, in the _meta of a progress notification that
// carries a chunk of a cell's output (its text is the message), of the
// stream it was printed on: "stdout" or "stderr". A notification without
// it says how long the cell has run.
const streamMetaKey = "ipybox/stream"

// progress sends one request's progress notifications while it waits for
// a cell: every chunk of output as the cell prints it, in order, with the
// text as the message; and after a second without output, one that says
// how long the cell has run. The values increase over the whole cell, from
// one round of approvals to the next (see cellRun.progress).
type progress struct {
	ctx   context.Context
	ss    *mcp.ServerSession
	token any
	run   *cellRun

	stop chan struct{}
	done chan struct{}
}

// startProgress starts the notifications of a request that gave a
// progress token; it returns nil otherwise (a nil *progress does
// nothing).
func startProgress(ctx context.Context, req *mcp.CallToolRequest, c *cellRun) *progress {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return nil
	}
	p := &progress{ctx: ctx, ss: req.Session, token: token, run: c, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		// A second after the last notification, whatever its phase.
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if c.quietFor() >= time.Second {
					p.send("", "")
				}
			case <-p.stop:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return p
}

// output sends a chunk of output.
func (p *progress) output(o *ipybox.Output) {
	if p == nil {
		return
	}
	p.send(o.Text, o.Stream)
}

// send sends a chunk of output (stream set) or the elapsed time.
func (p *progress) send(text, stream string) {
	c := p.run
	c.progMu.Lock()
	// Sent under the lock, so that the values reach the client in order.
	defer c.progMu.Unlock()
	elapsed := time.Since(c.start).Seconds()
	v := max(elapsed, c.progLast+0.001)
	c.progLast = v
	c.progSent = time.Now()
	params := &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: v}
	if stream != "" {
		c.progChunks++
		c.progLines += strings.Count(text, "\n")
		params.Message = text
		params.Meta = mcp.Meta{streamMetaKey: stream}
	} else {
		params.Message = fmt.Sprintf("cell running for %.0fs, %d lines of output", elapsed, c.progLines)
	}
	// An error means the client went away; the result will not reach it
	// either.
	_ = p.ss.NotifyProgress(p.ctx, params)
}

// end stops the ticker and waits for it.
func (p *progress) end() {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.done // bound: the ticker ends at stop; a send in progress has the call's ctx
}

// restartedNote tells that the kernel had died since the last call.
func restartedNote(d *ipybox.DiedError) string {
	return fmt.Sprintf("[ipybox: the kernel died at %s (%s); its state was lost; this cell ran in a fresh kernel]", d.At.Format("15:04:05"), d.Cause)
}
