package mcpserver

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// spillText writes n bytes in chunks through a spill of the given bounds
// (64 bytes kept in memory) and returns its note and file.
func spillText(t *testing.T, ws string, n int, cellMax, wsMax int64) (note string, file []byte) {
	t.Helper()
	sp := newSpill(ws, 64, cellMax, wsMax)
	chunk := strings.Repeat("x", 100)
	for i := 0; i < n; i += len(chunk) {
		sp.write(chunk[:min(len(chunk), n-i)])
	}
	note = sp.finish()
	if m := regexp.MustCompile(`in (ipybox-outputs/\S+) in the workspace`).FindStringSubmatch(note); m != nil {
		var err error
		if file, err = os.ReadFile(filepath.Join(ws, m[1])); err != nil {
			t.Fatal(err)
		}
	}
	return note, file
}

// TestSpillBounded attacks the disk with output without end: a cell's file
// stops at its bound, the workspace's folder at its own, and the result
// says how many bytes were dropped and where the kept part is.
func TestSpillBounded(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	note, file := spillText(t, ws, 500, 1000, 10000)
	if len(file) != 500 || !strings.Contains(note, "the whole output (500 bytes, stdout and stderr) is in ipybox-outputs/") {
		t.Errorf("under the bounds: %d bytes kept, note %q", len(file), note)
	}

	note, file = spillText(t, ws, 5000, 1000, 10000)
	want := "the output was 5000 bytes (stdout and stderr); its first 1000 bytes are in ipybox-outputs/"
	if len(file) != 1000 || !strings.Contains(note, want) || !strings.Contains(note, "the 4000 bytes after them were dropped: a cell keeps at most 1000 bytes there") {
		t.Errorf("past the cell's bound: %d bytes kept, note %q", len(file), note)
	}

	// 1500 bytes are in the folder now; it may hold 2000.
	note, file = spillText(t, ws, 5000, 1000, 2000)
	if len(file) != 500 || !strings.Contains(note, "its first 500 bytes are in") || !strings.Contains(note, "the 4500 bytes after them were dropped: ipybox-outputs holds at most 2000 bytes, and had 1500; delete old files there") {
		t.Errorf("past the folder's bound: %d bytes kept, note %q", len(file), note)
	}

	note, file = spillText(t, ws, 5000, 1000, 2000)
	if file != nil || note != "[ipybox: the whole output (5000 bytes) was not kept in a file: ipybox-outputs in the workspace holds 2000 bytes, its limit of 2000; delete old files there]" {
		t.Errorf("a full folder: %d bytes kept, note %q", len(file), note)
	}

	note, file = spillText(t, t.TempDir(), 5000, -1, 2000)
	if file != nil || !strings.Contains(note, "was not kept in a file: keeping long outputs is turned off") {
		t.Errorf("turned off: %d bytes kept, note %q", len(file), note)
	}
}

// TestSpillCountsBounded: a folder that kernel code filled with names
// counts as full, without reading them all.
func TestSpillCountsBounded(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	dir := filepath.Join(ws, spillDir)
	os.Mkdir(dir, 0o755)
	for i := range maxSpillEntries + 1 {
		os.WriteFile(filepath.Join(dir, "cell-"+strconv.Itoa(i)), nil, 0o644)
	}
	note, file := spillText(t, ws, 5000, 1000, 1<<40)
	if file != nil || !strings.Contains(note, "was not kept in a file") {
		t.Errorf("a folder of %d names: %d bytes kept, note %q", maxSpillEntries+1, len(file), note)
	}
}
