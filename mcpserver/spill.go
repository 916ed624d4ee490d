package mcpserver

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ipybox/ipybox/internal/safefs"
)

// spillDir is the workspace folder where a cell's whole output goes when it
// is too long for the tool result.
const spillDir = "ipybox-outputs"

// spill keeps a cell's whole output without holding it in memory: up to
// limit bytes in memory, then in a new file in the workspace, which the
// result names. Kernel code can write the workspace, so the file is created
// exclusively, with an unpredictable name, without following a link.
type spill struct {
	ws    string
	limit int
	buf   []byte
	f     *os.File
	rel   string
	total int64
	err   error
}

func newSpill(ws string, limit int) *spill { return &spill{ws: ws, limit: limit} }

func (s *spill) write(text string) {
	s.total += int64(len(text))
	if s.err != nil {
		return
	}
	if s.f == nil && len(s.buf)+len(text) <= s.limit {
		s.buf = append(s.buf, text...)
		return
	}
	if s.f == nil {
		var rnd [6]byte
		rand.Read(rnd[:])
		s.rel = filepath.Join(spillDir, fmt.Sprintf("cell-%s-%s.txt", time.Now().Format("20060102-150405"), hex.EncodeToString(rnd[:])))
		if s.f, s.err = safefs.CreateExclusive(s.ws, s.rel, 0o644); s.err != nil {
			return
		}
		if _, s.err = s.f.Write(s.buf); s.err != nil {
			return
		}
		s.buf = nil
	}
	_, s.err = s.f.WriteString(text)
}

// finish closes the file and returns a note for the result: where the
// whole output is, or why it could not be kept. Empty when everything fit
// in memory.
func (s *spill) finish() string {
	if s.f == nil && s.err == nil {
		return ""
	}
	if s.f != nil {
		if err := s.f.Close(); s.err == nil {
			s.err = err
		}
	}
	if s.err != nil {
		return fmt.Sprintf("[ipybox: the whole output (%d bytes) could not be kept in a file: %v]", s.total, s.err)
	}
	return fmt.Sprintf("[ipybox: the whole output (%d bytes, stdout and stderr) is in %s in the workspace]", s.total, s.rel)
}
