package pygen

import (
	"fmt"
	"strings"
)

// The fixed parts of every module. Only the helpers a module uses are
// included.

const versionPrelude = `
# pydantic 1.10 and 2.x take different configuration keys and resolve
# forward references differently; the major version is checked once, here.
_V2 = not _pd.VERSION.startswith("1.")
if _V2:
    # regex_engine: patterns are checked with Python's re, like pydantic 1,
    # rather than a second regex dialect.
    _CONFIG = {"populate_by_name": True, "protected_namespaces": (), "regex_engine": "python-re"}
else:
    _CONFIG = {"allow_population_by_field_name": True, "smart_union": True}
`

const patternHelper = `

def _pattern(regex):
    """Return Field arguments for a JSON Schema pattern, or none.

    A pattern is matched anywhere in the string; pydantic 1 anchors it at
    the start, hence the prefix there. A pattern that Python's re cannot
    compile is left to the server to check, so that this module imports.
    """
    if not _V2:
        regex = "(?s:.*?)(?:" + regex + ")"
    try:
        _re.compile(regex)
    except Exception:
        return {}
    return {"pattern" if _V2 else "regex": regex}
`

const itemsHelper = `

def _items(min_items, max_items):
    """Return Field arguments that bound the length of a list."""
    keys = ("min_length", "max_length") if _V2 else ("min_items", "max_items")
    return {k: v for k, v in zip(keys, (min_items, max_items)) if v is not None}
`

const rebuildTail = `

# Resolve forward references (nested and recursive models).
for _model in (%s):
    if _V2:
        _model.model_rebuild()
    else:
        _model.update_forward_refs()
del _model
`

// render writes the module of one tool.
func render(server string, t Tool, g *gen, hasResult bool, sig string) []byte {
	imports := map[string]bool{}
	usesPattern, usesItems := false, false
	var body strings.Builder
	for _, c := range g.classes {
		body.WriteString("\n\n")
		renderClass(&body, c, imports)
		for _, p := range c.props {
			usesPattern = usesPattern || p.pattern != ""
			usesItems = usesItems || p.items != [2]string{}
		}
	}

	var b strings.Builder
	b.WriteString(header)
	b.WriteString(pyDoc(fmt.Sprintf("The %s tool of the MCP server %s.\n\n%s", pyStr(t.Name), server, sig)))
	b.WriteString("\n\nfrom __future__ import annotations\n\n")
	if usesPattern {
		b.WriteString("import re as _re\n")
	}
	if len(imports) > 0 {
		b.WriteString("from typing import " + strings.Join(sortedKeys(imports), ", ") + "\n")
	}
	if usesPattern || len(imports) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("import pydantic as _pd\n")
	b.WriteString("from pydantic import Field as _Field\n\n")
	b.WriteString("import ipybox_runtime as _rt\n\n")
	b.WriteString("SERVER = " + pyStr(server) + "\n")
	b.WriteString("TOOL = " + pyStr(t.Name) + "\n")
	b.WriteString(versionPrelude)
	if usesPattern {
		b.WriteString(patternHelper)
	}
	if usesItems {
		b.WriteString(itemsHelper)
	}
	b.WriteString(body.String())

	names := make([]string, len(g.classes))
	for i, c := range g.classes {
		names[i] = c.name
	}
	tuple := strings.Join(names, ", ")
	if len(names) == 1 {
		tuple += ","
	}
	fmt.Fprintf(&b, rebuildTail, tuple)
	// dump_params sends what the caller set, and of the rest only these:
	// fields the schema requires that have a default (a const). Every
	// other default is the server's to apply.
	b.WriteString("\n")
	for _, c := range g.classes {
		var send []string
		for _, p := range c.props {
			if p.send && !p.required {
				send = append(send, pyStr(p.field))
			}
		}
		fmt.Fprintf(&b, "%s._ipybox_send = frozenset((%s))\n", c.name, strings.Join(send, ", ")+map[bool]string{true: ",", false: ""}[len(send) == 1])
	}

	// What run_tool can return (docs/tools.md): the Result model for
	// structured content, the text of a text-only result, the structured
	// content itself when there is no model, and otherwise a ToolResult.
	ret, resultArg := "str | dict | _rt.ToolResult", "None"
	if hasResult {
		ret, resultArg = "Result | str | _rt.ToolResult", "Result"
	}
	doc := t.Description
	if strings.TrimSpace(doc) == "" {
		doc = fmt.Sprintf("Call the %s tool of the MCP server %s.", pyStr(t.Name), server)
	}
	fmt.Fprintf(&b, "\n\ndef run(params: Params) -> %s:\n", ret)
	b.WriteString("    " + pyDoc(doc) + "\n")
	fmt.Fprintf(&b, "    return _rt.run_tool(SERVER, TOOL, params, %s)\n", resultArg)
	fmt.Fprintf(&b, "\n\nasync def run_async(params: Params) -> %s:\n", ret)
	b.WriteString("    " + pyDoc(doc) + "\n")
	fmt.Fprintf(&b, "    return await _rt.run_tool_async(SERVER, TOOL, params, %s)\n", resultArg)
	return []byte(b.String())
}

func renderClass(b *strings.Builder, c *class, imports map[string]bool) {
	fmt.Fprintf(b, "class %s(_pd.BaseModel, extra=%s, **_CONFIG):\n", c.name, pyStr(c.extra))
	empty := true
	if strings.TrimSpace(c.doc) != "" {
		b.WriteString("    " + pyDoc(c.doc) + "\n")
		empty = false
	}
	for i, p := range c.props {
		if i == 0 && !empty {
			b.WriteString("\n")
		}
		empty = false
		for _, n := range p.notes {
			b.WriteString("    # " + pyComment(n) + "\n")
		}
		b.WriteString("    " + p.field + ": " + p.typ.code(imports) + fieldValue(p) + "\n")
	}
	if empty {
		b.WriteString("    pass\n")
	}
}

// fieldValue renders what follows a field's annotation: nothing, a
// default, or a Field(...) call.
func fieldValue(p *prop) string {
	var args []string
	if p.field != p.original {
		args = append(args, "alias="+pyStr(p.original))
	}
	if p.desc != "" {
		args = append(args, "description="+pyStr(p.desc))
	}
	for _, kw := range p.kwargs {
		args = append(args, kw[0]+"="+kw[1])
	}
	if p.pattern != "" {
		args = append(args, "**_pattern("+pyStr(p.pattern)+")")
	}
	if p.items != [2]string{} {
		lo, hi := p.items[0], p.items[1]
		if lo == "" {
			lo = "None"
		}
		if hi == "" {
			hi = "None"
		}
		args = append(args, "**_items("+lo+", "+hi+")")
	}
	def := p.def
	if p.required {
		// An explicit ... keeps Optional and Any fields required under
		// pydantic 1 too, which would otherwise default them to None.
		if len(args) == 0 && !p.typ.nullable() {
			return ""
		}
		def = "..."
	} else if len(args) == 0 {
		return " = " + def
	}
	return " = _Field(" + strings.Join(append([]string{def}, args...), ", ") + ")"
}
