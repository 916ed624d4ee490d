package ipybox_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
)

// TestAttackShellEntryPoints: every IPython way into the shell goes through
// shell approval: bound and unbound methods, the magics (also called
// through the registry, or registered at run time), and IPython's process
// helpers. A rejected command does not run.
func TestAttackShellEntryPoints(t *testing.T) {
	t.Parallel()
	ex := start(t, &ipybox.Options{ApproveShellCommands: true, NoToolApproval: true})
	marker := filepath.Join(ex.Workspace(), "shell-ran")
	touch := "touch " + marker
	for _, tc := range []struct{ name, code string }{
		{"bang", "!" + touch},
		{"assign", "x = !" + touch},
		{"system_raw bound", "get_ipython().system_raw(" + pyStr(touch) + ")"},
		{"system_raw unbound", "type(get_ipython()).system_raw(get_ipython(), " + pyStr(touch) + ")"},
		{"system_piped unbound", "from IPython.core.interactiveshell import InteractiveShell\nInteractiveShell.system_piped(get_ipython(), " + pyStr(touch) + ")"},
		{"system unbound", "type(get_ipython()).system(get_ipython(), " + pyStr(touch) + ")"},
		{"getoutput unbound", "type(get_ipython()).getoutput(get_ipython(), " + pyStr(touch) + ")"},
		{"sx magic", "%sx " + touch},
		{"system magic", "%system " + touch},
		{"alias", "%alias evil " + touch + "\n%evil"},
		{"run_cell_magic", "get_ipython().run_cell_magic('bash', '', " + pyStr(touch) + ")"},
		{"script magic via the registry", "get_ipython().magics_manager.magics['cell']['script']('bash', " + pyStr(touch) + ")"},
		{"named magic via the registry", "get_ipython().magics_manager.magics['cell']['bash']('', " + pyStr(touch) + ")"},
		{"new ScriptMagics", "from IPython.core.magics.script import ScriptMagics\nScriptMagics(shell=get_ipython()).shebang('bash', " + pyStr(touch) + ")"},
		{"script magic made at run time", "m = get_ipython().magics_manager.registry['ScriptMagics']._make_script_magic('sh')\nm('', " + pyStr(touch) + ")"},
		{"magic registered at run time", "get_ipython().register_magic_function(lambda line, cell: get_ipython().system_raw(cell), 'cell', 'mine')\nget_ipython().run_cell_magic('mine', '', " + pyStr(touch) + ")"},
		{"utils.process.system", "from IPython.utils.process import system\nsystem(" + pyStr(touch) + ")"},
		{"utils.process.getoutput", "from IPython.utils import process\nprocess.getoutput(" + pyStr(touch) + ")"},
		{"getoutputerror", "from IPython.utils._process_common import getoutputerror\ngetoutputerror(" + pyStr(touch) + ")"},
		{"get_output_error_code", "from IPython.utils.process import get_output_error_code\nget_output_error_code(" + pyStr(touch) + ")"},
		{"ProcessHandler", "from IPython.utils._process_posix import ProcessHandler\nProcessHandler().system(" + pyStr(touch) + ")"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(marker)
			reqs, _, err := collect(t, ex, tc.code, nil, func(r *ipybox.ApprovalRequest) { r.Reject("no shell") })
			if _, serr := os.Stat(marker); serr == nil {
				t.Fatalf("the command ran although rejected")
			}
			if len(reqs) == 0 || !strings.Contains(reqs[0].Command, touch) {
				t.Errorf("no approval request for the command (err %v)", err)
			}
		})
	}
	// Approved, the command that runs is the one shown.
	os.Remove(marker)
	var shown string
	_, _, err := collect(t, ex, "type(get_ipython()).system_raw(get_ipython(), "+pyStr(touch)+")", nil, func(r *ipybox.ApprovalRequest) {
		shown = r.Command
		r.Accept()
	})
	if err != nil || shown != touch {
		t.Errorf("approved: err %v, shown %q", err, shown)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the approved command did not run: %v", err)
	}
}
