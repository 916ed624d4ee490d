package pylit

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
)

// Evaluated is what Python made of one literal: its value, or the error.
type Evaluated struct {
	Value string `json:"value"`
	Err   string `json:"err"`
}

// PythonEval reads each literal with Python's ast.literal_eval, warnings
// as errors, in one interpreter. It skips t (fails it in CI) without
// python3.
func PythonEval(t testing.TB, lits []string) []Evaluated {
	t.Helper()
	py := testenv.NeedsTool(t, "python3")
	in, err := json.Marshal(lits)
	if err != nil {
		t.Fatal(err)
	}
	const script = `
import ast, json, sys, warnings
warnings.simplefilter("error")
out = []
for lit in json.load(sys.stdin):
    try:
        v = ast.literal_eval(lit)
        if not isinstance(v, str):
            raise TypeError("not a str: %r" % (v,))
        out.append({"value": v, "err": ""})
    except Exception as e:
        out.append({"value": "", "err": "%s: %s" % (type(e).__name__, e)})
sys.stdout.write(json.dumps(out))
`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", script)
	cmd.Stdin = strings.NewReader(string(in))
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output() // bound: ctx's 60 s, then WaitDelay
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	var res []Evaluated
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(lits) {
		t.Fatalf("python3 answered %d results for %d literals (%v): %s", len(res), len(lits), err, out)
	}
	return res
}
