package escape_test

import (
	"fmt"
	"strings"

	"github.com/ipybox/ipybox/internal/escape"
)

func ExampleText() {
	fmt.Println(escape.Text("echo safe\r\x1b[2Krm -rf ~"))
	// Output: echo safe\r\x1b[2Krm -rf ~
}

func ExampleWriter() {
	var terminal strings.Builder
	w := escape.NewWriter(&terminal)
	fmt.Fprint(w, "50%\r100%\n")                 // a progress bar: passes
	fmt.Fprint(w, "\x1b[31mError\x1b[0m\n")      // colours: pass
	fmt.Fprint(w, "\x1b]52;c;Y3VybA==\x07\x1b[") // a clipboard write: shown
	fmt.Fprint(w, "1A\x1b[2K\n")                 // cursor up, erase: shown
	w.Flush()
	for line := range strings.Lines(terminal.String()) {
		fmt.Printf("%q\n", line)
	}
	// Output:
	// "50%\r100%\n"
	// "\x1b[31mError\x1b[0m\n"
	// "\\x1b]52;c;Y3VybA==\\x07\\x1b[1A\\x1b[2K\n"
}
