package ipybox

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/pyruntime"
	"github.com/ipybox/ipybox/internal/safefs"
	"github.com/ipybox/ipybox/internal/toolserver"
)

// maxDownload bounds the file DownloadFile copies: the kernel's side of a
// transfer is kernel code's to choose, and the host's disk is not.
const maxDownload = 1 << 30

// transferChunk is how many bytes one input() reply (upload) or one silent
// cell (download) carries.
const transferChunk = 4 << 20

// chunkMIME is the MIME type of a download chunk's display (see
// ipybox_runtime/_remote.py).
const chunkMIME = "application/x-ipybox-chunk+json"

// UploadFile copies r into the file relpath of the kernel's working
// directory, over the kernel's own channel, so that it works with every
// backend: a local or sandboxed kernel, a container, or a gateway kernel on
// another machine. Parent directories are created. The file appears whole
// or not at all: it is written beside its name and renamed when complete.
// relpath is relative and slash-separated, without "..". It waits for a
// running cell, as Execute does, and returns the bytes copied.
func (e *Executor) UploadFile(ctx context.Context, relpath string, r io.Reader) (int64, error) {
	rel, err := e.startTransfer(ctx, relpath)
	if err != nil {
		return 0, err
	}
	defer e.release()
	// The cell reads the data with input(), a chunk per call; an empty
	// line ends it, and "-" says the read here failed.
	// input runs on goroutines of the kernel package, one call at a time
	// (input() waits for its answer); one may still run when Execute
	// returns early, hence the atomics.
	var total atomic.Int64
	var readErr atomic.Pointer[error]
	buf := make([]byte, transferChunk)
	input := func(ctx context.Context, _ string, _ bool) (string, error) {
		if err := ctx.Err(); err != nil {
			return "", err // the cell is over: r is the caller's again
		}
		n, err := io.ReadFull(r, buf)
		total.Add(int64(n))
		switch {
		case n > 0 && (err == nil || err == io.ErrUnexpectedEOF):
			return base64.StdEncoding.EncodeToString(buf[:n]), nil
		case err == nil || err == io.EOF || err == io.ErrUnexpectedEOF:
			return "", nil
		}
		readErr.Store(&err)
		return "-", nil
	}
	code := fmt.Sprintf("__import__('ipybox_runtime._remote', fromlist=['_']).recv(%s, %s)\n", pyruntime.Quote(rel), e.pyRoot())
	_, err = e.k.Execute(ctx, code, &kernel.ExecOptions{Silent: true, Input: input})
	switch rerr := readErr.Load(); {
	case rerr != nil:
		return 0, fmt.Errorf("ipybox: upload %s: read: %w", relpath, *rerr)
	case err != nil:
		return 0, transferErr("upload", relpath, err)
	}
	return total.Load(), nil
}

// DownloadFile copies the file relpath of the kernel's working directory to
// w, over the kernel's own channel (see UploadFile), and returns the bytes
// copied. A file over 1 GiB is refused. It waits for a running
// cell, as Execute does.
func (e *Executor) DownloadFile(ctx context.Context, relpath string, w io.Writer) (int64, error) {
	rel, err := e.startTransfer(ctx, relpath)
	if err != nil {
		return 0, err
	}
	defer e.release()
	var total int64
	size := int64(-1)
	for {
		code := fmt.Sprintf("__import__('ipybox_runtime._remote', fromlist=['_']).get(%s, %d, %d, %s)\n",
			pyruntime.Quote(rel), total, transferChunk, e.pyRoot())
		res, err := e.k.Execute(ctx, code, &kernel.ExecOptions{Silent: true})
		if err != nil {
			return total, transferErr("download", relpath, err)
		}
		n, data, err := chunkOf(res)
		if err != nil {
			return total, fmt.Errorf("ipybox: download %s: %w", relpath, err)
		}
		if size < 0 {
			if n > maxDownload {
				return 0, fmt.Errorf("ipybox: download %s: the file is %d bytes; the limit is %d ", relpath, n, maxDownload)
			}
			size = n
		}
		// The kernel says how big the file was at the first chunk; it is
		// held to that (a file that grows while it is read is cut there).
		if rest := size - total; int64(len(data)) > rest {
			data = data[:rest]
		}
		if len(data) > 0 {
			if _, err := w.Write(data); err != nil {
				return total, fmt.Errorf("ipybox: download %s: write: %w", relpath, err)
			}
			total += int64(len(data))
		}
		if total >= size {
			return total, nil
		}
		// Short of the size, a chunk is whole: a read of a regular file
		// is short only at its end. Else the file shrank while it was
		// read (the copy would be cut and called complete), or kernel
		// code sends a byte per cell to hold the host for 2^30 cells.
		if len(data) < transferChunk {
			return total, fmt.Errorf("ipybox: download %s: the file changed while it was read: %d of %d bytes came, then a chunk of %d", relpath, total, size, len(data))
		}
	}
}

// startTransfer checks relpath and waits for the kernel (a running cell);
// on success the caller releases it.
func (e *Executor) startTransfer(ctx context.Context, relpath string) (string, error) {
	rel, err := checkTransferPath(relpath)
	if err != nil {
		return "", err
	}
	if err := e.acquire(ctx); err != nil {
		return "", err
	}
	return rel, nil
}

// chunkOf finds a download chunk's display in res: the file's size and the
// chunk's bytes.
func chunkOf(res *kernel.Result) (int64, []byte, error) {
	for _, d := range res.Displays {
		v, ok := d.Data[chunkMIME].(map[string]any)
		if !ok {
			continue
		}
		size, ok := v["size"].(float64)
		enc, ok2 := v["data"].(string)
		if !ok || !ok2 || size < 0 || size > 1<<53 || size != math.Trunc(size) || base64.StdEncoding.DecodedLen(len(enc)) > transferChunk+3 {
			return 0, nil, errors.New("the kernel sent a malformed chunk")
		}
		b, err := base64.StdEncoding.DecodeString(enc)
		if err != nil || len(b) > transferChunk {
			return 0, nil, errors.New("the kernel sent a malformed chunk")
		}
		return int64(size), b, nil
	}
	return 0, nil, errors.New("the kernel sent no chunk (is ipybox_runtime importable in it?)")
}

// pyRoot is the directory the kernel resolves transfer paths against, as
// a Python expression: the workspace as the kernel sees it, or None (the
// working directory the kernel started in) for a gateway kernel.
func (e *Executor) pyRoot() string {
	if e.kernelWorkspace == "" {
		return "None"
	}
	return pyruntime.Quote(e.kernelWorkspace)
}

// checkTransferPath validates an UploadFile or DownloadFile path.
func checkTransferPath(rel string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("ipybox: path %q %s; give a path relative to the kernel's working directory, such as data/input.csv", rel, why)
	}
	switch {
	case rel == "":
		return bad("is empty")
	case strings.ContainsRune(rel, 0):
		return bad("contains a NUL byte")
	case strings.HasPrefix(rel, "/") || strings.Contains(rel, `\`):
		return bad("is absolute or has a backslash")
	}
	for _, part := range strings.Split(rel, "/") {
		if part == ".." {
			return bad(`contains ".."`)
		}
	}
	clean := path.Clean(rel)
	if clean == "." {
		return bad("names the directory itself")
	}
	return clean, nil
}

// transferErr words a failed transfer cell's error.
func transferErr(op, rel string, err error) error {
	var pe *kernel.PythonError
	if errors.As(err, &pe) {
		switch pe.Name {
		case "FileNotFoundError":
			return fmt.Errorf("ipybox: %s %s: no such file in the kernel's working directory", op, rel)
		case "IsADirectoryError":
			return fmt.Errorf("ipybox: %s %s: it is a directory; give a file", op, rel)
		}
		return fmt.Errorf("ipybox: %s %s: %s", op, rel, pe.Error())
	}
	return fmt.Errorf("ipybox: %s %s: %w", op, rel, executorErr(err))
}

// moduleNameRE is one part of a generated module's name: pygen writes
// ASCII identifiers only.
var moduleNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// maxModuleBytes bounds one generated module the tool server serves.
const maxModuleBytes = 16 << 20

// toolModules serves the generated modules of the workspace's mcptools
// folder to a kernel that does not share this disk (a gateway kernel),
// whose runtime imports them from the tool server. Names are
// mcptools[.server[.tool]], each part an identifier; nothing else under the
// workspace is read, and no link is followed.
func toolModules(workspace string) func(name string) ([]byte, bool, error) {
	return func(name string) ([]byte, bool, error) {
		parts := strings.Split(name, ".")
		if parts[0] != "mcptools" || len(parts) > 3 {
			return nil, false, fmt.Errorf("%w: %s", toolserver.ErrNoModule, name)
		}
		for _, p := range parts {
			if !moduleNameRE.MatchString(p) || strings.HasPrefix(p, "__") {
				return nil, false, fmt.Errorf("%w: %s", toolserver.ErrNoModule, name)
			}
		}
		dir := strings.Join(parts, "/")
		for _, c := range []struct {
			file string
			pkg  bool
		}{{dir + "/__init__.py", true}, {dir + ".py", false}} {
			src, err := safefs.ReadFile(workspace, c.file, maxModuleBytes)
			if err == nil {
				return src, c.pkg, nil
			}
			switch {
			case errors.Is(err, safefs.ErrSymlink):
				// Kernel code may have planted it, pointing at a host file.
				return nil, false, fmt.Errorf("%w: %s is a symbolic link, which is not followed", toolserver.ErrNoModule, c.file)
			case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
				return nil, false, err
			}
		}
		return nil, false, fmt.Errorf("%w: %s", toolserver.ErrNoModule, name)
	}
}
