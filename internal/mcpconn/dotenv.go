package mcpconn

import (
	"fmt"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/ipybox/ipybox/internal/safefs"
)

// LoadDotEnv reads a .env file into a map. The format:
//
//	# a comment line; blank lines are skipped
//	KEY=value            # an unquoted value ends before " #" and is trimmed
//	export KEY=value     # the "export " prefix is allowed
//	KEY="a \"quoted\"\nvalue"   # double quotes: \n \r \t \\ \" \$ are escapes
//	KEY='literal $X \n'  # single quotes: taken literally
//
// Quoted values may span lines. Values are not interpolated: "${X}" in a
// .env value stays as written. A later line wins over an earlier one with the
// same key. A missing file is an error wrapping fs.ErrNotExist. A symbolic
// link as the file is refused (kernel code may have planted it in the
// workspace), and so is a file over 1 MiB.
func LoadDotEnv(path string) (map[string]string, error) {
	data, err := safefs.ReadFile(filepath.Dir(path), filepath.Base(path), 1<<20)
	if err != nil {
		return nil, fmt.Errorf("reading .env: %w", err)
	}
	m, err := parseDotEnv(string(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

func parseDotEnv(src string) (map[string]string, error) {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	out := map[string]string{}
	lineNo := 0
	for len(src) > 0 {
		var line string
		line, src, _ = strings.Cut(src, "\n")
		lineNo++
		start := lineNo
		// Trimmed on the left only: a quoted value that continues on the
		// next line keeps the spaces that end this one.
		t := strings.TrimLeftFunc(line, unicode.IsSpace)
		if strings.TrimSpace(t) == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if rest, ok := strings.CutPrefix(t, "export"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			t = strings.TrimLeftFunc(rest, unicode.IsSpace)
		}
		key, val, ok := strings.Cut(t, "=")
		key = strings.TrimSpace(key)
		if !ok {
			return nil, fmt.Errorf("line %d: %q is not KEY=value", start, line)
		}
		if !isEnvName(key) {
			return nil, fmt.Errorf("line %d: %q is not a variable name (letters, digits and _, not starting with a digit)", start, key)
		}
		val = strings.TrimLeft(val, " \t")
		if val != "" && (val[0] == '"' || val[0] == '\'') {
			q := val[0]
			body := val[1:]
			// A quoted value may continue on the following lines.
			for {
				end := closingQuote(body, q)
				if end >= 0 {
					after := strings.TrimSpace(body[end+1:])
					if after != "" && !strings.HasPrefix(after, "#") {
						return nil, fmt.Errorf("line %d: unexpected %q after the closing quote of %s", lineNo, after, key)
					}
					body = body[:end]
					break
				}
				if src == "" {
					return nil, fmt.Errorf("line %d: the quoted value of %s has no closing %c", start, key, q)
				}
				var next string
				next, src, _ = strings.Cut(src, "\n")
				lineNo++
				body += "\n" + next
			}
			if q == '"' {
				body = unescapeDouble(body)
			}
			out[key] = body
			continue
		}
		if i := strings.Index(val, " #"); i >= 0 {
			val = val[:i]
		} else if i := strings.Index(val, "\t#"); i >= 0 {
			val = val[:i]
		}
		out[key] = strings.TrimSpace(val)
	}
	return out, nil
}

// closingQuote returns the index in s of the quote q that closes a value, or -1.
// In double quotes a backslash escapes the next character.
func closingQuote(s string, q byte) int {
	for i := 0; i < len(s); i++ {
		switch {
		case q == '"' && s[i] == '\\':
			i++
		case s[i] == q:
			return i
		}
	}
	return -1
}

func unescapeDouble(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case '\\', '"', '$':
			b.WriteByte(s[i])
		default:
			b.WriteByte('\\')
			b.WriteByte(s[i])
		}
	}
	return b.String()
}
