// Package pyinstall says how to install what a kernel's Python lacks, in
// the words of each system ipybox runs on.
package pyinstall

import "fmt"

// Hint says how to install the Python package pkg (ipykernel, matplotlib,
// pydantic, numpy) for a kernel on the system goos (a runtime.GOOS
// value). On Debian and Ubuntu the package is python3-<pkg>.
func Hint(goos, pkg string) string {
	switch goos {
	case "darwin":
		// Homebrew's Python refuses a bare pip install (PEP 668): a venv.
		return fmt.Sprintf("install Python 3 (`brew install python`) and %[1]s into a virtualenv "+
			"(`python3 -m venv ~/.ipybox-venv && ~/.ipybox-venv/bin/pip install %[1]s`), "+
			"then use it (IPYBOX_PYTHON=~/.ipybox-venv/bin/python)", pkg)
	case "windows":
		return fmt.Sprintf("install Python 3 from python.org (with the py launcher), then `py -3 -m pip install %s`", pkg)
	default:
		return fmt.Sprintf("install it with `apt-get install python3-%[1]s` (or `pip install %[1]s` into the kernel's Python)", pkg)
	}
}
