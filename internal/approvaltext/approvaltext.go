// Package approvaltext renders what an approval asks about for the person
// who decides: the shell command that would run, or the arguments of a tool
// call. Kernel code chose every byte of both, so the text is escaped
// (internal/escape) and summarised honestly, within a bounded size: every
// line that runs is numbered, runs of blank lines are collapsed into one
// line that says how many, a long line shows its head and tail and how
// much is left out between, and a command of many lines shows its first
// and last lines and how many are not shown. A last line says how many
// lines and bytes there are in all, so that it sits beside the question
// even when the rest has scrolled away.
//
//	approvaltext.Command("touch x" + strings.Repeat("\n", 120) + "ls")
//	// 1: touch x
//	// 2-121: (120 blank lines)
//	// 122: ls
//	// [122 lines, 129 bytes]
package approvaltext

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ipybox/ipybox/internal/escape"
)

const (
	// headLines and tailLines are how many lines (or collapsed runs) are
	// shown from the start and from the end of a long text.
	headLines, tailLines = 12, 12
	// lineRunes is how many characters of one line are shown: its first
	// and its last half.
	lineRunes = 400
	// indentBytes is the largest JSON that Args re-indents.
	indentBytes = 8 << 10
)

// Command returns the shell command cmd as shown for approval. A command
// of one short line is that line, escaped.
func Command(cmd string) string {
	shown, lines, _ := summarise(cmd, true)
	if lines == 1 {
		return shown
	}
	return fmt.Sprintf("%s\n[%d lines, %d bytes]", shown, lines, len(cmd))
}

// Args returns the JSON text of a tool call's arguments as shown for
// approval: indented when it is short, else as sent, summarised like a
// command but without line numbers.
func Args(raw []byte) string {
	text := string(raw)
	if len(raw) <= indentBytes {
		var b bytes.Buffer
		if json.Indent(&b, raw, "", "  ") == nil {
			text = b.String()
		}
	}
	shown, _, elided := summarise(text, false)
	if !elided {
		return shown
	}
	return fmt.Sprintf("%s\n[%d bytes of JSON, shown in part]", shown, len(raw))
}

// item is one shown line, or a run of blank lines.
type item struct {
	first, last int // line numbers, from 1
	text        string
	blank       bool
}

// summarise walks text once, keeping only what is shown: the first
// headLines items and a ring of the last tailLines. It returns what is
// shown, how many lines text has, and whether any of it is left out.
func summarise(text string, numbered bool) (shown string, lines int, elided bool) {
	var head []item
	tail := make([]item, 0, tailLines)
	ring := 0
	long := false
	var run *item // the blank run being counted
	push := func(it item) {
		if len(head) < headLines {
			head = append(head, it)
			return
		}
		if len(tail) < tailLines {
			tail = append(tail, it)
			return
		}
		tail[ring] = it
		ring = (ring + 1) % tailLines
	}
	flush := func() {
		if run != nil {
			if run.first == run.last {
				run.blank = false // a single blank line shows as itself
			}
			push(*run)
			run = nil
		}
	}
	total := 0 // items pushed
	for rest := text; ; {
		line, more, found := strings.Cut(rest, "\n")
		lines++
		if strings.TrimLeft(line, " \t") == "" {
			if run == nil {
				run = &item{first: lines, blank: true}
				total++
			}
			run.last, run.text = lines, line
		} else {
			flush()
			shown, cut := clip(line)
			long = long || cut
			push(item{first: lines, last: lines, text: shown})
			total++
		}
		if !found {
			break
		}
		rest = more
	}
	flush()
	if lines == 1 {
		return head[0].text, 1, long
	}
	var b strings.Builder
	write := func(it item) {
		switch {
		case it.blank:
			fmt.Fprintf(&b, "%s(%d blank lines)\n", label(it, numbered), it.last-it.first+1)
		default:
			b.WriteString(label(it, numbered) + it.text + "\n")
		}
	}
	for _, it := range head {
		write(it)
	}
	if total > len(head)+len(tail) {
		first := head[len(head)-1].last + 1
		last := tail[ring].first - 1
		fmt.Fprintf(&b, "[... lines %d-%d not shown ...]\n", first, last)
		long = true
	}
	for i := range tail {
		write(tail[(ring+i)%len(tail)])
	}
	return strings.TrimSuffix(b.String(), "\n"), lines, long
}

func label(it item, numbered bool) string {
	switch {
	case !numbered:
		return ""
	case it.first == it.last:
		return fmt.Sprintf("%d: ", it.first)
	}
	return fmt.Sprintf("%d-%d: ", it.first, it.last)
}

// clip escapes line, keeping its first and last lineRunes/2 characters
// with a note of how many are left out between; it reports whether it cut.
func clip(line string) (string, bool) {
	if len(line) <= lineRunes || utf8.RuneCountInString(line) <= lineRunes {
		return escape.Text(line), false
	}
	n := utf8.RuneCountInString(line)
	h := runeOffset(line, lineRunes/2)
	t := runeOffset(line, n-lineRunes/2)
	return fmt.Sprintf("%s[... %d characters not shown ...]%s", escape.Text(line[:h]), n-lineRunes, escape.Text(line[t:])), true
}

// runeOffset is the byte offset of the i-th character of s.
func runeOffset(s string, i int) int {
	off := 0
	for ; i > 0 && off < len(s); i-- {
		_, size := utf8.DecodeRuneInString(s[off:])
		off += size
	}
	return off
}

// Facts returns the lines that every approval question shows after what
// it asks about, in the terminal prompt and in the MCP elicitation alike:
// why it asks (an ask rule of the policy, or "no rule matched"), and the
// rules that an answer remembered for the session or always would write
// (as narrow as the call), or why none can be. The rules hold
// kernel-chosen text and the reason quotes a rule: both are escaped.
// Without a reason (no approval policy) there are no facts.
func Facts(why string, rules []string, cannot string) []string {
	if why == "" {
		return nil
	}
	out := []string{"why: " + escape.Text(why)}
	switch {
	case cannot != "":
		out = append(out, "remember: only once: "+escape.Text(cannot))
	case len(rules) > 0:
		for _, r := range rules {
			s, _ := clip(r)
			out = append(out, "remember as: "+s)
		}
	}
	return out
}
