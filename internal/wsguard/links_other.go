//go:build !unix

package wsguard

import "log/slog"

// hardLinks: no sandbox runs here, so there is nothing to mask.
func hardLinks(ws string, masks, dirs []string, log *slog.Logger) ([]string, error) { return nil, nil }
