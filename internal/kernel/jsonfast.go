package kernel

import (
	"encoding/binary"
	"encoding/json"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// decodeStream decodes a stream message's content ({"name": ..., "text":
// ...}). Stream text is the bulk of a chatty cell's traffic, and
// encoding/json scans every string twice; this decoder handles the flat
// object of strings that ipykernel sends in one pass, and defers to
// encoding/json for anything else (so the result is always the same as
// encoding/json's, which FuzzDecodeStream checks).
func decodeStream(content []byte) (name, text string, err error) {
	if n, t, ok := fastStream(content); ok {
		return n, t, nil
	}
	var raw struct {
		Name string `json:"name"`
		Text string `json:"text"`
	}
	err = json.Unmarshal(content, &raw)
	return raw.Name, raw.Text, err
}

// fastStream parses an object whose values are all strings. ok is false for
// anything it does not handle; the caller then uses encoding/json.
func fastStream(b []byte) (name, text string, ok bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return "", "", false
	}
	i = skipWS(b, i+1)
	seenName, seenText := false, false
	if i < len(b) && b[i] == '}' {
		return "", "", skipWS(b, i+1) == len(b)
	}
	for {
		key, j, ok := fastString(b, i)
		if !ok {
			return "", "", false
		}
		i = skipWS(b, j)
		if i >= len(b) || b[i] != ':' {
			return "", "", false
		}
		i = skipWS(b, i+1)
		val, j, ok := fastString(b, i)
		if !ok {
			return "", "", false
		}
		// encoding/json matches keys case-insensitively and lets the last
		// duplicate win; stay exact by declining such input.
		switch key {
		case "name":
			if seenName {
				return "", "", false
			}
			name, seenName = val, true
		case "text":
			if seenText {
				return "", "", false
			}
			text, seenText = val, true
		default:
			if !isOtherKey(key) {
				return "", "", false
			}
		}
		i = skipWS(b, j)
		if i >= len(b) {
			return "", "", false
		}
		if b[i] == '}' {
			return name, text, skipWS(b, i+1) == len(b)
		}
		if b[i] != ',' {
			return "", "", false
		}
		i = skipWS(b, i+1)
	}
}

// isOtherKey reports whether key cannot match "name" or "text" under
// encoding/json's case-insensitive matching.
func isOtherKey(key string) bool {
	if len(key) != 4 {
		return true
	}
	for _, k := range []string{"name", "text"} {
		eq := true
		for i := 0; i < 4; i++ {
			c := key[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != k[i] {
				eq = false
				break
			}
		}
		if eq {
			return false
		}
	}
	// Non-ASCII folds (the Kelvin sign for k, the long s for s) cannot
	// occur in a four-byte key that differs from both in ASCII.
	return true
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// fastString decodes the JSON string starting at b[i]. It declines (ok
// false) invalid UTF-8 and lone surrogates, whose replacement rules it
// leaves to encoding/json.
func fastString(b []byte, i int) (s string, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	i++
	start := i
	// Fast path: no escapes.
	i = plainRun(b, i)
	if i < len(b) && b[i] == '"' {
		if !utf8.Valid(b[start:i]) {
			return "", 0, false
		}
		return string(b[start:i]), i + 1, true
	}
	out := make([]byte, 0, len(b)-start)
	out = append(out, b[start:i]...)
	for i < len(b) {
		// Copy the run up to the next quote, backslash or control byte.
		j := plainRun(b, i)
		out = append(out, b[i:j]...)
		i = j
		if i >= len(b) || b[i] < 0x20 {
			return "", 0, false
		}
		if b[i] == '"' {
			if !utf8.Valid(out) {
				return "", 0, false
			}
			return ownedString(out), i + 1, true
		}
		// An escape.
		if i+1 >= len(b) {
			return "", 0, false
		}
		switch b[i+1] {
		case '"', '\\', '/':
			out = append(out, b[i+1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(b, i+2)
			if !ok {
				return "", 0, false
			}
			if utf16.IsSurrogate(r) {
				r2, ok := hex4(b, i+8)
				if !ok || i+7 >= len(b) || b[i+6] != '\\' || b[i+7] != 'u' {
					return "", 0, false
				}
				dec := utf16.DecodeRune(r, r2)
				if dec == utf8.RuneError {
					return "", 0, false
				}
				out = utf8.AppendRune(out, dec)
				i += 12
				continue
			}
			out = utf8.AppendRune(out, r)
			i += 6
			continue
		default:
			return "", 0, false
		}
		i += 2
	}
	return "", 0, false
}

// plainRun returns the index of the first quote, backslash or control byte
// in b from i on, or len(b). It looks at eight bytes at a time: stream text
// is the bulk of a chatty cell's traffic, and a byte loop here was most of
// the host's time on it.
func plainRun(b []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q, bs := x^(ones*'"'), x^(ones*'\\')
		// A byte of a word is zero, or below 0x20, exactly when its high
		// bit survives these (the classic has-zero and has-less tests).
		m := (q - ones) &^ q
		m |= (bs - ones) &^ bs
		m |= (x - ones*0x20) &^ x
		if m&highs != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return i
}

// ownedString makes a string of buf, which nothing else refers to, without
// copying it, unless that would pin much more memory than the string needs
// (escapes shrink the text: buf was sized for the raw JSON).
func ownedString(buf []byte) string {
	if len(buf) == 0 || cap(buf) > 2*len(buf)+64 {
		return string(buf)
	}
	return unsafe.String(unsafe.SliceData(buf), len(buf))
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		r <<= 4
		switch {
		case '0' <= c && c <= '9':
			r |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			r |= rune(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}
