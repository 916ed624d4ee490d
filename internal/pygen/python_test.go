package pygen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/pygen"
	"github.com/ipybox/ipybox/internal/testenv"
)

// pythonCandidates are the interpreters the tests look at to find one with
// pydantic 1 and one with pydantic 2 (on the dev machines: Debian's
// /usr/bin/python3 has 1.10, the pyenv python3 first on PATH has 2.x).
var pythonCandidates = []string{"python3", "/usr/bin/python3", "/usr/local/bin/python3", "python"}

var pythons = sync.OnceValue(func() map[string]string {
	found := map[string]string{} // pydantic major version -> interpreter
	for _, c := range pythonCandidates {
		p, err := exec.LookPath(c)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := exec.CommandContext(ctx, p, "-c", "import pydantic; print(pydantic.VERSION)").Output()
		cancel()
		if err != nil {
			continue
		}
		major, _, _ := strings.Cut(strings.TrimSpace(string(out)), ".")
		if _, ok := found[major]; !ok {
			found[major] = p
		}
	}
	return found
})

// needsPydantic returns an interpreter whose pydantic has the given major
// version, or skips (fails in CI).
func needsPydantic(t *testing.T, major string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs Python: skipped with -short")
	}
	p, ok := pythons()[major]
	if !ok {
		testenv.Missing(t, "a python3 with pydantic %s.x (tried %v; Debian: apt-get install python3-pydantic for 1.10, pip install 'pydantic>=2' for 2.x)", major, pythonCandidates)
	}
	return p
}

// runPython runs script with input on stdin and returns its stdout.
func runPython(t *testing.T, python, dir string, env []string, input []byte, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = bytes.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", python, args, err, stderr.String())
	}
	return out
}

// parseScript parses and compiles every file named on stdin (one per line)
// and prints the failures, one per line.
const parseScript = `
import ast, sys
for path in sys.stdin.read().split("\n"):
    if not path:
        continue
    try:
        src = open(path, "rb").read()
        ast.parse(src, path)
        compile(src, path, "exec", dont_inherit=True)
    except Exception as e:
        print("%s: %s: %s" % (path, type(e).__name__, e))
`

// hostileStrings are put in every place a server controls, on top of the
// hostile.json case, to show that whatever they contain, the output parses.
var hostileStrings = []string{
	``, `"`, `""`, `"""`, `""""`, `\`, `\\`, `\"""`, `'''`, "\x00", "\r", "\r\n", "\n\"\"\"\n",
	"\u2028", "\u2029", "\u0085", "\u202e", "\ufeff", "\xff\xfe", "\xed\xa0\x80", "#", "# x\n",
	`__import__('os').system('touch pygen-pwned')`, "\"\"\"; __import__('os').system('touch pygen-pwned'); \"\"\"",
	"\\N{BULLET}", `\x41\u0041`, "{0}", "%s", "\t\v\f", "-- a.py --", strings.Repeat("x", 300),
}

func hostileTools() []pygen.Tool {
	var tools []pygen.Tool
	for i, s := range hostileStrings {
		str, _ := json.Marshal(s)
		schema := `{"type": "object", "title": ` + string(str) + `, "description": ` + string(str) + `,
			"properties": {` + string(str) + `: {"type": "string", "description": ` + string(str) + `,
				"default": ` + string(str) + `, "pattern": ` + string(str) + `, "title": ` + string(str) + `},
				"e": {"enum": [` + string(str) + `, 1]},
				"c": {"const": ` + string(str) + `},
				"r": {"$ref": "#/$defs/` + string(str[1:len(str)-1]) + `"},
				"o": {"type": "object", "title": ` + string(str) + `, "properties": {"x": {"type": ` + string(str) + `}}}},
			"$defs": {` + string(str) + `: {"type": "object", "description": ` + string(str) + `, "properties": {"y": {}}}}}`
		tools = append(tools, pygen.Tool{
			Name:         s + string(rune('a'+i%26)) + strings.Repeat("_", i), // unique
			Description:  s,
			InputSchema:  json.RawMessage(schema),
			OutputSchema: json.RawMessage(schema),
		})
	}
	return tools
}

// TestGeneratedFilesParse checks with Python's own parser and compiler
// that every file generated from every case is valid Python, including
// the hostile inputs. One interpreter process handles all files.
func TestGeneratedFilesParse(t *testing.T) {
	python := testenv.NeedsTool(t, "python3")
	dir := t.TempDir()
	var paths []string
	add := func(server string, tools []pygen.Tool) {
		files, _, err := pygen.Generate(server, tools)
		if err != nil {
			t.Fatalf("%s: %v", server, err)
		}
		for _, f := range files {
			p := filepath.Join(dir, filepath.FromSlash(f.Path))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, f.Data, 0o644); err != nil {
				t.Fatal(err)
			}
			paths = append(paths, p)
		}
	}
	for _, c := range cases {
		add(c.name, loadTools(t, c.file))
	}
	add("fuzzed", hostileTools())
	out := runPython(t, python, dir, nil, []byte(strings.Join(paths, "\n")), "-c", parseScript)
	if len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("generated files that are not valid Python:\n%s", out)
	}
	if len(paths) < 60 {
		t.Errorf("parsed only %d files; the cases went missing", len(paths))
	}
}

// A check that a module's Params, built from kwargs (by alias or by field
// name), reaches the tool as want; or that it is refused (raises).
type paramsCheck struct {
	server, tool string
	kwargs, want string // JSON
	raises       bool
}

var paramsChecks = []paramsCheck{
	{server: "filesystem", tool: "read_text_file", kwargs: `{"path": "a.txt"}`, want: `{"path": "a.txt"}`},
	{server: "filesystem", tool: "read_text_file", kwargs: `{"path": "a.txt", "head": 3}`, want: `{"path": "a.txt", "head": 3}`},
	{server: "filesystem", tool: "read_text_file", kwargs: `{}`, raises: true},
	{server: "filesystem", tool: "edit_file", kwargs: `{"path": "p", "edits": [{"oldText": "a", "newText": "b"}]}`,
		want: `{"path": "p", "edits": [{"oldText": "a", "newText": "b"}]}`},
	{server: "filesystem", tool: "edit_file", kwargs: `{"path": "p", "edits": [], "dryRun": false}`,
		want: `{"path": "p", "edits": [], "dryRun": false}`},
	{server: "filesystem", tool: "list_directory_with_sizes", kwargs: `{"path": ".", "sortBy": "date"}`, raises: true},
	{server: "memory", tool: "create_relations", kwargs: `{"relations": [{"from": "a", "to": "b", "relationType": "knows"}]}`,
		want: `{"relations": [{"from": "a", "to": "b", "relationType": "knows"}]}`},
	{server: "memory", tool: "create_relations", kwargs: `{"relations": [{"from_": "a", "to": "b", "relationType": "knows"}]}`,
		want: `{"relations": [{"from": "a", "to": "b", "relationType": "knows"}]}`},
	{server: "memory", tool: "create_entities", kwargs: `{"entities": [{"name": "n", "entityType": "t", "observations": ["o"]}]}`,
		want: `{"entities": [{"name": "n", "entityType": "t", "observations": ["o"]}]}`},
	{server: "everything", tool: "get-annotated-message", kwargs: `{"messageType": "error"}`,
		want: `{"messageType": "error"}`},
	{server: "everything", tool: "get-resource-links", kwargs: `{}`, want: `{}`},
	{server: "everything", tool: "get-resource-links", kwargs: `{"count": 11}`, raises: true},
	{server: "everything", tool: "echo", kwargs: `{}`, raises: true},
	{server: "names", tool: "props",
		kwargs: `{"from": "x", "user-id": 1, "user_id": 2, "class": "c", "schema": "s", "json": "j", "model_config": "m", "copy": true, "_meta": {"k": 1}, "": "e", "1abc": "d", "type": "t", "None": "n"}`,
		want:   `{"from": "x", "user-id": 1, "user_id": 2, "class": "c", "schema": "s", "json": "j", "model_config": "m", "copy": true, "_meta": {"k": 1}, "": "e", "1abc": "d", "type": "t", "None": "n"}`},
	{server: "names", tool: "props",
		kwargs: `{"from_": "x", "user_id_2": 1, "class_": "c", "schema_": "s", "json_": "j", "model_config_": "m", "copy_": true, "meta": {"k": 1}, "field": "e", "field_1abc": "d", "str_": "s", "entity": {"id": "i"}, "Entity_2": "E"}`,
		want:   `{"from": "x", "user-id": 1, "class": "c", "schema": "s", "json": "j", "model_config": "m", "copy": true, "_meta": {"k": 1}, "": "e", "1abc": "d", "str": "s", "entity": {"id": "i"}, "Entity": "E"}`},
	{server: "constructs", tool: "closed", kwargs: `{"only": "x", "bogus": 1}`, raises: true},
	{server: "constructs", tool: "maps", kwargs: `{"open_obj": {"known": "k", "other": 1}, "labels": {"a": "b"}}`,
		want: `{"open_obj": {"known": "k", "other": 1}, "labels": {"a": "b"}}`},
	{server: "constructs", tool: "unions", kwargs: `{"id": 5, "nullable": null}`, want: `{"id": 5, "nullable": null}`},
	{server: "constructs", tool: "unions", kwargs: `{"id": "5", "nullable": "y", "maybe": null, "shape": {"kind": "square", "side": 2}}`,
		want: `{"id": "5", "nullable": "y", "maybe": null, "shape": {"kind": "square", "side": 2}}`},
	{server: "constructs", tool: "enums", kwargs: `{"color": "red"}`, want: `{"color": "red", "kind": "fixed"}`},
	{server: "constructs", tool: "enums", kwargs: `{"color": "red", "level": 2}`, want: `{"color": "red", "level": 2, "kind": "fixed"}`},
	{server: "constructs", tool: "enums", kwargs: `{"color": "purple"}`, raises: true},
	{server: "constructs", tool: "enums", kwargs: `{"color": "red", "kind": "other"}`, raises: true},
	{server: "constructs", tool: "all_of", kwargs: `{"merged": {"a": "x", "b": 1, "c": true}}`, want: `{"merged": {"a": "x", "b": 1, "c": true}}`},
	{server: "constructs", tool: "all_of", kwargs: `{"merged": {"a": "x"}}`, raises: true},
	{server: "constructs", tool: "arrays", kwargs: `{"tags": ["a"], "pair": ["x", 1], "points": [{"x": 1, "y": 2}]}`,
		want: `{"tags": ["a"], "pair": ["x", 1], "points": [{"x": 1, "y": 2}]}`},
	{server: "constructs", tool: "arrays", kwargs: `{"tags": []}`, raises: true},
	{server: "constructs", tool: "arrays", kwargs: `{"tags": ["a", "b", "c", "d"]}`, raises: true},
	{server: "constructs", tool: "constraints", kwargs: `{}`, want: `{}`},
	{server: "constructs", tool: "constraints", kwargs: `{"count": 3}`, want: `{"count": 3}`},
	{server: "constructs", tool: "constraints", kwargs: `{"count": 0}`, raises: true},
	{server: "constructs", tool: "constraints", kwargs: `{"ratio": 1}`, raises: true},
	{server: "constructs", tool: "constraints", kwargs: `{"old_style": 0}`, raises: true},
	{server: "constructs", tool: "constraints", kwargs: `{"step": 7}`, raises: true},
	{server: "constructs", tool: "constraints", kwargs: `{"name": "ab1"}`, raises: true},
	{server: "constructs", tool: "constraints", kwargs: `{"name": "abcdefghi"}`, raises: true},
	{server: "constructs", tool: "constraints", kwargs: `{"unanchored": "xyz"}`, raises: true},
	{server: "constructs", tool: "constraints", kwargs: `{"list_bounds": [1, 2, 3]}`, raises: true},
	{server: "constructs", tool: "constraints",
		kwargs: `{"name": "abc", "unanchored": "abc", "ecma_only": "123", "broken": "x", "flags": "ABC", "union_min": "s"}`,
		want:   `{"name": "abc", "unanchored": "abc", "ecma_only": "123", "broken": "x", "flags": "ABC", "union_min": "s"}`},
	{server: "constructs", tool: "defaults", kwargs: `{}`,
		want: `{"required_with_default": "given"}`},
	{server: "constructs", tool: "nested", kwargs: `{"outer": {"inner": {}}}`, want: `{"outer": {"inner": {}}}`},
	{server: "constructs", tool: "nested", kwargs: `{"outer": {"inner": {"value": 7}}}`, want: `{"outer": {"inner": {"value": 7}}}`},
	{server: "constructs", tool: "nested", kwargs: `{"outer": {"inner": {"zzz": 1}}}`, raises: true},
	{server: "constructs", tool: "root_ref", kwargs: `{"q": "x"}`, want: `{"q": "x"}`},
	{server: "refs", tool: "tree", kwargs: `{"root": {"name": "r", "children": [{"name": "c", "parent": null}]}}`,
		want: `{"root": {"name": "r", "children": [{"name": "c", "parent": null}]}}`},
	{server: "refs", tool: "self_root", kwargs: `{"label": "a", "sub": {"label": "b"}}`, want: `{"label": "a", "sub": {"label": "b"}}`},
	{server: "refs", tool: "mutual", kwargs: `{"a": {"b": {"a": {"b": {"n": 1}}}}}`, want: `{"a": {"b": {"a": {"b": {"n": 1}}}}}`},
	{server: "refs", tool: "aliases", kwargs: `{"id": "x", "slashed": 1, "tilde": true, "percent": {"v": "s"}, "nested_list": ["a"]}`,
		want: `{"id": "x", "slashed": 1, "tilde": true, "percent": {"v": "s"}, "nested_list": ["a"]}`},
	{server: "hostile", tool: "controls", kwargs: `{}`, want: `{"v": "\u0000\u202e"}`},
}

// A check that run (or run_async) with the stub runtime answering data
// returns a value whose attribute path attr equals want.
type resultCheck struct {
	server, tool string
	kwargs       string // JSON; "" means {}
	data         string // JSON: the structuredContent, or a string for text
	attr         string // dotted; numbers index lists
	want         string // JSON
	typ          string // the result's type: a module attribute or a builtin
	async        bool
}

var resultChecks = []resultCheck{
	{server: "memory", tool: "read_graph",
		data: `{"entities": [{"name": "a", "entityType": "person", "observations": ["x"]}], "relations": [{"from": "a", "to": "b", "relationType": "knows"}]}`,
		attr: "relations.0.from_", want: `"a"`, typ: "Result"},
	{server: "memory", tool: "read_graph",
		data: `{"entities": [{"name": "a", "entityType": "person", "observations": ["x"]}], "relations": []}`,
		attr: "entities.0.observations", want: `["x"]`},
	{server: "everything", tool: "get-structured-content", kwargs: `{"location": "Chicago"}`,
		data: `{"temperature": 22.5, "conditions": "Sunny", "humidity": 40}`, attr: "conditions", want: `"Sunny"`, typ: "Result"},
	{server: "everything", tool: "echo", kwargs: `{"message": "hi"}`, data: `"hi"`, want: `"hi"`, typ: "str"},
	{server: "everything", tool: "echo", kwargs: `{"message": "hi"}`, data: `"hi"`, want: `"hi"`, typ: "str", async: true},
	{server: "filesystem", tool: "read_media_file", kwargs: `{"path": "x.bin"}`,
		data: `{"content": [{"type": "resource", "resource": {"uri": "file:///x.bin", "blob": "AA=="}}]}`,
		attr: "content.0.resource.uri", want: `"file:///x.bin"`},
	{server: "constructs", tool: "nested", kwargs: `{"outer": {"inner": {}}}`,
		data: `{"a": {"b": {"c": 5, "d": ["x"]}}, "total": 1.5}`, attr: "a.b.c", want: `5`, typ: "Result"},
	{server: "constructs", tool: "nested", kwargs: `{"outer": {"inner": {}}}`,
		data: `{"a": {"b": {"c": 5, "d": ["x"]}}}`, attr: "a.b.d", want: `["x"]`, async: true},
	{server: "constructs", tool: "closed", data: `{"ok": true, "added_later": 1}`, attr: "ok", want: `true`},
	{server: "constructs", tool: "not_object", data: `{"a": 1}`, attr: "a", want: `1`},
	{server: "refs", tool: "tree", kwargs: `{"root": {"name": "r"}}`,
		data: `{"head": {"value": 1, "next": {"value": 2, "next": {"value": 3}}}}`, attr: "head.next.next.value", want: `3`},
	{server: "names", tool: "props", kwargs: `{"from": "x"}`,
		data: `{"from": "a", "class": "b", "user-id": 3}`, attr: "class_", want: `"b"`},
	{server: "names", tool: "props", kwargs: `{"from": "x"}`,
		data: `{"from": "a", "class": "b", "user-id": 3}`, attr: "user_id", want: `3`},
}

// TestModulesUnderPydantic writes every case with Write, then, under
// pydantic 1 and pydantic 2, imports every module with warnings as errors,
// runs the parameter and result checks against a stub runtime that uses
// the real _models.py, and checks that hostile names and descriptions come
// through as data, exactly, without running anything.
func TestModulesUnderPydantic(t *testing.T) {
	for _, major := range []string{"1", "2"} {
		t.Run("pydantic"+major, func(t *testing.T) {
			python := needsPydantic(t, major)
			dir := t.TempDir()
			ws := filepath.Join(dir, "ws")
			mods := map[[2]string]string{} // server, tool -> import path
			var spec struct {
				Modules   []string         `json:"modules"`
				Params    []map[string]any `json:"params"`
				Results   []map[string]any `json:"results"`
				Roundtrip []map[string]any `json:"roundtrip"`
				Marker    string           `json:"marker"`
			}
			for _, c := range cases {
				tools := loadTools(t, c.file)
				ms, err := pygen.Write(filepath.Join(ws, "mcptools"), c.name, tools)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range ms {
					path := "mcptools." + c.name + "." + m.Name
					mods[[2]string{c.name, m.Tool}] = path
					spec.Modules = append(spec.Modules, path)
				}
				if c.name == "hostile" || c.name == "names" {
					for _, tool := range tools {
						spec.Roundtrip = append(spec.Roundtrip, map[string]any{
							"module": mods[[2]string{c.name, tool.Name}], "tool": tool.Name,
							"description": tool.Description, "properties": propertyNames(t, tool.InputSchema),
						})
					}
				}
			}
			module := func(server, tool string) string {
				m, ok := mods[[2]string{server, tool}]
				if !ok {
					t.Fatalf("no module for tool %q of %s", tool, server)
				}
				return m
			}
			for _, c := range paramsChecks {
				check := map[string]any{"module": module(c.server, c.tool), "kwargs": jsonValue(t, c.kwargs), "raises": c.raises}
				if !c.raises {
					check["want"] = jsonValue(t, c.want)
				}
				spec.Params = append(spec.Params, check)
			}
			for _, c := range hostileParamsChecks(t) {
				spec.Params = append(spec.Params, map[string]any{"module": module("hostile", c.tool), "kwargs": c.kwargs, "want": c.want, "defaults": c.defaults})
			}
			for _, c := range resultChecks {
				kw := c.kwargs
				if kw == "" {
					kw = "{}"
				}
				spec.Results = append(spec.Results, map[string]any{
					"module": module(c.server, c.tool), "kwargs": jsonValue(t, kw), "data": jsonValue(t, c.data),
					"attr": c.attr, "want": jsonValue(t, c.want), "type": c.typ, "async": c.async,
				})
			}
			spec.Marker = filepath.Join(dir, "pygen-pwned")

			for _, e := range runChecks(t, python, major, dir, ws, spec) {
				t.Error(e)
			}
			t.Logf("%d modules, %d params checks, %d result checks, %d round trips",
				len(spec.Modules), len(spec.Params), len(spec.Results), len(spec.Roundtrip))
		})
	}
}

// runChecks runs testdata/check.py on spec with the stub runtime (and the
// real _models.py) and the workspace ws on the path, and returns the
// errors it reports.
func runChecks(t *testing.T, python, major, dir, ws string, spec any) []string {
	t.Helper()
	rt := filepath.Join(dir, "rt", "ipybox_runtime")
	copyFile(t, filepath.Join("testdata", "stubruntime", "ipybox_runtime", "__init__.py"), filepath.Join(rt, "__init__.py"))
	copyFile(t, filepath.Join(testenv.RepoRoot(t), "internal", "pyruntime", "ipybox_runtime", "_models.py"), filepath.Join(rt, "_models.py"))
	script, err := filepath.Abs(filepath.Join("testdata", "check.py"))
	if err != nil {
		t.Fatal(err)
	}
	input, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	out := runPython(t, python, dir, []string{
		"PYTHONPATH=" + filepath.Join(dir, "rt") + string(os.PathListSeparator) + ws,
		"PYTHONDONTWRITEBYTECODE=1",
	}, input, script)
	var report struct {
		Pydantic string
		Errors   []string
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("bad report from check.py: %v\n%s", err, out)
	}
	if !strings.HasPrefix(report.Pydantic, major+".") {
		t.Fatalf("ran under pydantic %s, want %s.x", report.Pydantic, major)
	}
	return report.Errors
}

// TestPropertiesNamedLikeModelAttributes asks each pydantic for the public
// attributes of BaseModel and generates a tool with a property of each
// name: the module must import without a warning, and every property must
// reach the server under its own name.
func TestPropertiesNamedLikeModelAttributes(t *testing.T) {
	for _, major := range []string{"1", "2"} {
		t.Run("pydantic"+major, func(t *testing.T) {
			python := needsPydantic(t, major)
			dir := t.TempDir()
			out := runPython(t, python, dir, nil, nil, "-c",
				"import json, pydantic; print(json.dumps(sorted(n for n in dir(pydantic.BaseModel) if not n.startswith('_'))))")
			var attrs []string
			if err := json.Unmarshal(out, &attrs); err != nil || len(attrs) < 10 {
				t.Fatalf("BaseModel attributes: %v %s", err, out)
			}
			props := map[string]any{}
			kwargs := map[string]any{}
			for _, a := range attrs {
				props[a] = map[string]string{"type": "string"}
				kwargs[a] = "v-" + a
			}
			schema, _ := json.Marshal(map[string]any{"type": "object", "properties": props})
			ws := filepath.Join(dir, "ws")
			mods, err := pygen.Write(filepath.Join(ws, "mcptools"), "attrs", []pygen.Tool{{Name: "t", InputSchema: schema, OutputSchema: schema}})
			if err != nil {
				t.Fatal(err)
			}
			module := "mcptools.attrs." + mods[0].Name
			spec := map[string]any{
				"modules":   []string{module},
				"params":    []any{map[string]any{"module": module, "kwargs": kwargs, "want": kwargs}},
				"results":   []any{map[string]any{"module": module, "data": kwargs, "attr": "", "want": kwargs, "type": "Result", "by_alias": true}},
				"roundtrip": []any{map[string]any{"module": module, "tool": "t", "description": "", "properties": attrs}},
			}
			for _, e := range runChecks(t, python, major, dir, ws, spec) {
				t.Error(e)
			}
		})
	}
}

// hostileParamsChecks checks that hostile enum values reach the server
// exactly as the schema gave them, and that hostile defaults are the
// models' defaults exactly (they are not sent: the server applies its own).
func hostileParamsChecks(t *testing.T) []struct {
	tool     string
	kwargs   map[string]any
	want     map[string]any
	defaults map[string]any
} {
	var out []struct {
		tool     string
		kwargs   map[string]any
		want     map[string]any
		defaults map[string]any
	}
	for _, tool := range loadTools(t, "cases/hostile.json") {
		var s struct {
			Properties map[string]struct {
				Default any   `json:"default"`
				Enum    []any `json:"enum"`
			} `json:"properties"`
			Required []string `json:"required"`
		}
		if err := json.Unmarshal(tool.InputSchema, &s); err != nil {
			t.Fatal(err)
		}
		defaults := map[string]any{}
		var enumProp string
		var enum []any
		for name, p := range s.Properties {
			if p.Default != nil {
				defaults[name] = p.Default
			}
			if p.Enum != nil {
				enumProp, enum = name, p.Enum
			}
		}
		for _, v := range enum {
			want := map[string]any{enumProp: v}
			for _, r := range s.Required {
				if d, ok := defaults[r]; ok {
					want[r] = d // required with a default: sent
				}
			}
			out = append(out, struct {
				tool     string
				kwargs   map[string]any
				want     map[string]any
				defaults map[string]any
			}{tool.Name, map[string]any{enumProp: v}, want, defaults})
		}
	}
	if len(out) == 0 {
		t.Fatal("hostile.json has no enum to check")
	}
	return out
}

func propertyNames(t *testing.T, schema json.RawMessage) []string {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if len(schema) > 0 {
		if err := json.Unmarshal(schema, &s); err != nil {
			t.Fatal(err)
		}
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func jsonValue(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad JSON in a check: %v: %s", err, s)
	}
	return v
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
