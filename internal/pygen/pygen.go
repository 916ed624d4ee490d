// Package pygen generates typed Python modules from MCP tool definitions.
//
// Generate is a pure function: for a server S it returns S/__init__.py and
// one module S/<tool>.py per tool, each holding a pydantic model Params
// (from the tool's inputSchema), a model Result (when the tool has an
// outputSchema), and the functions run and run_async that hand the call to
// the kernel-side package ipybox_runtime:
//
//	from mcptools.fs.read_text_file import Params, run
//	print(run(Params(path="notes.txt", head=3)).content)
//
// The modules import and validate under pydantic 1.10 and 2.x alike, on
// Python 3.8 and later. Whatever a server sends (names, descriptions,
// defaults, enum values, patterns) ends up in the source only escaped, so
// the generated code is valid and inert for any input; a schema construct
// the generator does not understand becomes Any, with a comment.
//
// Write puts the files under a workspace's mcptools folder, replacing only
// that server's folder.
package pygen

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Tool is the part of an MCP tool definition that pygen reads.
type Tool struct {
	Name         string
	Description  string
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage // nil or empty: the tool has no output schema
}

// File is one generated file.
type File struct {
	Path string // relative to the mcptools folder, with '/': "fs/read_text_file.py"
	Data []byte
}

// Module describes one generated tool module.
type Module struct {
	Name string // the Python module name: "read_text_file", "tool_1"
	Tool string // the MCP tool name it calls: "read_text_file", "tool-1"
	// Signature tells how to call the tool, with the input models the
	// parameters use, e.g.
	// "run(Params(path: str, head: float | None = None)) -> Result".
	Signature string
}

var serverNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// maxServerNameLen keeps server folder names short and portable.
const maxServerNameLen = 64

// ValidServerName reports whether name can name a server: it becomes a
// package (mcptools.<name>) and a folder, so it must be a Python identifier
// of ASCII letters, digits and underscores (Python NFKC-normalizes other
// identifiers, so two file names could name one module), not starting with
// a digit or with two underscores (no server is __init__ or __pycache__),
// not a hard keyword, and at most 64 characters. It is the one rule for
// server names: mcpconn.ValidName is this.
func ValidServerName(name string) error {
	const rule = "a server name must be a Python identifier (ASCII letters, digits and _, not starting with a digit or with two underscores), not a keyword, at most 64 characters"
	switch {
	case !serverNameRE.MatchString(name), len(name) > maxServerNameLen, pyKeywords[name],
		strings.HasPrefix(name, "__"):
		return fmt.Errorf("invalid server name %q: %s; try %q", name, rule, suggestServerName(name))
	}
	return nil
}

func suggestServerName(name string) string {
	n := strings.Trim(identifier(name), "_")
	if n == "" {
		return "server"
	}
	if n[0] >= '0' && n[0] <= '9' || pyKeywords[n] {
		n = "s_" + n
	}
	if len(n) > maxServerNameLen {
		n = n[:maxServerNameLen]
	}
	return n
}

// Generate returns the Python files for the tools of server, and a
// description of each tool module. The result depends only on the
// arguments, and not on the order of tools: module names are assigned in
// the order of tool names, so that a renamed sibling cannot swap them.
func Generate(server string, tools []Tool) ([]File, []Module, error) {
	if err := ValidServerName(server); err != nil {
		return nil, nil, err
	}
	sorted := append([]Tool(nil), tools...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for i, t := range sorted {
		if t.Name == "" {
			return nil, nil, fmt.Errorf("server %s: a tool has an empty name; every MCP tool needs one", server)
		}
		if i > 0 && sorted[i-1].Name == t.Name {
			return nil, nil, fmt.Errorf("server %s: tool name %q appears twice; tool names must be unique", server, t.Name)
		}
	}

	// Tools whose names are already module names keep them; the others
	// are named next, with a numeric suffix on a collision.
	modNames := make([]string, len(sorted))
	names := newNamer("_")
	for i, t := range sorted {
		if n := moduleName(t.Name); n == t.Name {
			modNames[i] = names.claim(n) // unique, as tool names are
		}
	}
	for i, t := range sorted {
		if modNames[i] == "" {
			modNames[i] = names.claim(moduleName(t.Name))
		}
	}

	files := []File{{Path: server + "/__init__.py", Data: initFile(server)}}
	mods := make([]Module, 0, len(sorted))
	for i, t := range sorted {
		src, sig, err := generateModule(server, t, modNames[i])
		if err != nil {
			return nil, nil, err
		}
		files = append(files, File{Path: server + "/" + modNames[i] + ".py", Data: src})
		mods = append(mods, Module{Name: modNames[i], Tool: t.Name, Signature: sig})
	}
	sort.Slice(files[1:], func(i, j int) bool { return files[1+i].Path < files[1+j].Path })
	sort.Slice(mods, func(i, j int) bool { return mods[i].Name < mods[j].Name })
	return files, mods, nil
}

const header = "# Code generated by ipybox pygen. DO NOT EDIT.\n"

func initFile(server string) []byte {
	var b strings.Builder
	b.WriteString(header)
	b.WriteString(pyDoc(fmt.Sprintf("Tools of the MCP server %s.\n\n"+
		"Each tool is a module of its own: from mcptools.%s.<tool> import Params, run", server, server)))
	b.WriteString("\n\nSERVER = " + pyStr(server) + "\n")
	return []byte(b.String())
}

func parseSchema(raw json.RawMessage) (any, error) {
	if len(strings.TrimSpace(string(raw))) == 0 {
		return nil, nil
	}
	return parseJSON(raw)
}

func generateModule(server string, t Tool, mod string) ([]byte, string, error) {
	in, err := parseSchema(t.InputSchema)
	if err != nil {
		return nil, "", fmt.Errorf("tool %q: inputSchema: %w", t.Name, err)
	}
	out, err := parseSchema(t.OutputSchema)
	if err != nil {
		return nil, "", fmt.Errorf("tool %q: outputSchema: %w", t.Name, err)
	}
	g := newGen()
	params := g.rootClass("Params", in, true)
	nInput := len(g.classes)
	var result *class
	if out != nil {
		result = g.rootClass("Result", out, false)
	}
	g.nameFields()
	sig := signature(g.classes[:nInput], params, result)
	return render(server, t, g, result != nil, sig), sig, nil
}

// nameFields gives every property a field name: a valid identifier that
// shadows nothing (keywords, BaseModel attributes, the names annotations
// use, classes) and is unique in its class. A property whose name is
// already such an identifier keeps it; the others are named after it.
func (g *gen) nameFields() {
	classNames := map[string]bool{}
	for _, c := range g.classes {
		classNames[c.name] = true
	}
	for _, c := range g.classes {
		names := newNamer("_", pyKeywords, modelAttrs, typeNames, classNames)
		for _, p := range c.props {
			if fieldName(p.original) == p.original && names.free(p.original) {
				p.field = names.claim(p.original)
			}
		}
		for _, p := range c.props {
			if p.field == "" {
				p.field = names.claim(fieldName(p.original))
			}
		}
	}
}

// maxSigDefault is the longest default shown in a signature.
const maxSigDefault = 40

// signature renders how to call the tool: run(Params(...)) -> Result,
// followed by the input classes that the parameters use.
func signature(inputs []*class, params, result *class) string {
	ret := "str"
	if result != nil {
		ret = result.name
	}
	parts := []string{"run(" + classSig(params) + ") -> " + ret}
	for _, c := range inputs {
		if c != params {
			parts = append(parts, classSig(c))
		}
	}
	return strings.Join(parts, "; ")
}

func classSig(c *class) string {
	args := make([]string, len(c.props))
	for i, p := range c.props {
		args[i] = p.field + ": " + p.typ.sig()
		if !p.required {
			d := p.def
			if len(d) > maxSigDefault {
				d = "..."
			}
			args[i] += " = " + d
		}
	}
	return c.name + "(" + strings.Join(args, ", ") + ")"
}
