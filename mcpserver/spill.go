package mcpserver

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ipybox/ipybox/internal/safefs"
	"github.com/ipybox/ipybox/internal/telemetry"
)

// spillDir is the workspace folder where a cell's whole output goes when it
// is too long for the tool result.
const spillDir = "ipybox-outputs"

// maxSpillEntries bounds the entries of spillDir that are counted: kernel
// code can fill the folder with names, and counting must not cost what it
// chose. A folder with more counts as full.
const maxSpillEntries = 4096

// spill keeps a cell's whole output without holding it in memory: up to
// limit bytes in memory, then in a new file in the workspace, which the
// result names. Kernel code can write the workspace, so the file is created
// exclusively, with an unpredictable name, without following a link. The
// file holds at most cellMax bytes, and no more than leaves spillDir under
// wsMax; the rest is dropped, and counted.
type spill struct {
	ws string
	// limit is read by the cell's pump, and lowered by a "still running"
	// answer (lower), from another goroutine.
	limit         atomic.Int64
	cellMax       int64
	wsMax         int64
	buf           []byte
	f             *os.File
	rel           string
	room          int64 // bytes the file may still take
	used          int64 // bytes in spillDir when the file was made
	total, kept   int64
	err           error
	full, refused bool // room ran out; the folder was full before
}

func newSpill(ws string, limit int, cellMax, wsMax int64) *spill {
	s := &spill{ws: ws, cellMax: cellMax, wsMax: wsMax}
	s.limit.Store(int64(limit))
	return s
}

// lower makes limit the most output that is kept in memory alone: past
// it, the whole output goes to the file. A cell that answered "still
// running" has shown its output in parts, each cut to max_output_chars,
// and its result shows only a head and a tail: the file keeps the rest.
// Output in memory so far is all there (buf), so none is lost.
func (s *spill) lower(limit int) {
	for {
		old := s.limit.Load()
		if int64(limit) >= old || s.limit.CompareAndSwap(old, int64(limit)) {
			return
		}
	}
}

func (s *spill) write(text string) {
	s.total += int64(len(text))
	if s.err != nil || s.refused {
		return
	}
	if s.f == nil && int64(len(s.buf)+len(text)) <= s.limit.Load() {
		s.buf = append(s.buf, text...)
		return
	}
	s.open()
	if s.f != nil {
		s.put(text)
	}
}

// open moves the output kept in memory to a new file, once.
func (s *spill) open() {
	if s.f == nil && s.err == nil && !s.refused {
		if s.cellMax < 0 || s.wsMax < 0 {
			s.refused = true
			return
		}
		s.used = spillUsage(s.ws)
		s.room = min(s.cellMax, s.wsMax-s.used)
		if s.room <= 0 {
			s.refused = true
			return
		}
		var rnd [6]byte
		rand.Read(rnd[:])
		s.rel = filepath.Join(spillDir, fmt.Sprintf("cell-%s-%s.txt", time.Now().Format("20060102-150405"), hex.EncodeToString(rnd[:])))
		if s.f, s.err = safefs.CreateExclusive(s.ws, s.rel, 0o644); s.err != nil {
			return
		}
		s.put(string(s.buf))
		s.buf = nil
	}
}

// put writes what of text the file has room for.
func (s *spill) put(text string) {
	if s.err != nil || s.full {
		return
	}
	if int64(len(text)) > s.room {
		text = text[:s.room]
		s.full = true
	}
	var n int
	n, s.err = io.WriteString(s.f, text)
	telemetry.AddSpillBytes(n)
	s.kept += int64(n)
	s.room -= int64(n)
}

// finish closes the file and returns a note for the result: where the
// whole output is, or how much of it is and what was dropped, or why it
// could not be kept. Empty when everything fit in memory.
func (s *spill) finish() string {
	if s.f == nil && s.err == nil && !s.refused && int64(len(s.buf)) > s.limit.Load() {
		// The limit was lowered after the last output (lower).
		s.open()
	}
	if s.f == nil && s.err == nil && !s.refused {
		return ""
	}
	if s.f != nil {
		if err := s.f.Close(); s.err == nil {
			s.err = err
		}
	}
	switch {
	case s.err != nil:
		return fmt.Sprintf("[ipybox: the whole output (%d bytes) could not be kept in a file: %v]", s.total, s.err)
	case s.refused && (s.cellMax < 0 || s.wsMax < 0):
		return fmt.Sprintf("[ipybox: the whole output (%d bytes) was not kept in a file: keeping long outputs is turned off]", s.total)
	case s.refused:
		return fmt.Sprintf("[ipybox: the whole output (%d bytes) was not kept in a file: %s in the workspace holds %d bytes, its limit of %d; delete old files there]",
			s.total, spillDir, s.used, s.wsMax)
	case s.kept < s.total:
		why := fmt.Sprintf("a cell keeps at most %d bytes there", s.cellMax)
		if s.wsMax-s.used < s.cellMax {
			why = fmt.Sprintf("%s holds at most %d bytes, and had %d; delete old files there", spillDir, s.wsMax, s.used)
		}
		return fmt.Sprintf("[ipybox: the output was %d bytes (stdout and stderr); its first %d bytes are in %s in the workspace, and the %d bytes after them were dropped: %s]",
			s.total, s.kept, s.rel, s.total-s.kept, why)
	}
	return fmt.Sprintf("[ipybox: the whole output (%d bytes, stdout and stderr) is in %s in the workspace]", s.total, s.rel)
}

// spillUsage adds up the sizes of the regular files in the workspace's
// spillDir, reading at most maxSpillEntries entries (more count as full).
// Nothing is followed: a link there counts as nothing.
func spillUsage(ws string) int64 {
	d, err := safefs.OpenFile(ws, spillDir, os.O_RDONLY, 0)
	if err != nil {
		return 0
	}
	defer d.Close()
	if fi, err := d.Stat(); err != nil || !fi.IsDir() {
		return 0
	}
	ents, _ := d.ReadDir(maxSpillEntries + 1)
	if len(ents) > maxSpillEntries {
		return 1 << 62
	}
	var n int64
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), "cell-") {
			continue
		}
		if info, err := e.Info(); err == nil {
			n += info.Size()
		}
	}
	return n
}
