//go:build unix

package wsguard

import (
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"syscall"
)

// hardLinks finds the other names, in the workspace, of masked files (and
// of the files in masked folders) that have more than one link: a link
// made earlier (perhaps by kernel code, before the file was filled with
// secrets) would show the same content unmasked. It walks the workspace
// only when such a file exists.
func hardLinks(ws string, masks, dirs []string, log *slog.Logger) ([]string, error) {
	type key struct{ dev, ino uint64 }
	want := map[key]int{}     // missing links per inode
	names := map[key]string{} // a masked name of each
	var hidden []string
	for _, d := range dirs {
		filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err != nil || len(hidden) >= secretBudget {
				return filepath.SkipDir
			}
			if e.Type().IsRegular() {
				hidden = append(hidden, path)
			}
			return nil
		})
	}
	for _, m := range slices.Concat(masks, hidden) {
		var st syscall.Stat_t
		if err := syscall.Lstat(m, &st); err == nil && st.Nlink > 1 {
			k := key{uint64(st.Dev), st.Ino}
			want[k] = int(st.Nlink) - 1
			names[k] = m
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	var out []string
	budget := secretBudget * 4
	filepath.WalkDir(ws, func(path string, d fs.DirEntry, err error) error {
		if err != nil || budget <= 0 {
			return nil
		}
		budget--
		if d.IsDir() && slices.Contains(dirs, path) {
			return filepath.SkipDir // masked whole
		}
		if d.IsDir() || !d.Type().IsRegular() || slices.Contains(masks, path) {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Lstat(path, &st) != nil {
			return nil
		}
		if k := (key{uint64(st.Dev), st.Ino}); want[k] > 0 {
			want[k]--
			out = append(out, path)
		}
		return nil
	})
	for k, n := range want {
		if n > 0 {
			name := names[k]
			return nil, fmt.Errorf("the secret file %s has %d other name(s) (hard links) in the workspace that ipybox did not find (the search stops after %d entries and at paths longer than PATH_MAX); "+
				"a kernel would read the secret through them: remove the other names, or move the file out of the workspace", name, n, secretBudget*4)
		}
	}
	return out, nil
}
