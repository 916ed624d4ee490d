package pygen

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// pyKeywords are Python's hard keywords (3.8 to 3.13). Soft keywords
// (match, case, type, _) are valid identifiers and need no care.
var pyKeywords = set(
	"False", "None", "True", "and", "as", "assert", "async", "await",
	"break", "class", "continue", "def", "del", "elif", "else", "except",
	"finally", "for", "from", "global", "if", "import", "in", "is",
	"lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try",
	"while", "with", "yield",
)

// modelAttrs are the public attributes of BaseModel in pydantic 1.10 and
// 2.x. A field with one of these names would shadow a method (pydantic 2
// warns, pydantic 1 breaks the method), so such properties get another
// field name and keep theirs as the alias. TestModelAttrsComplete checks
// this list against both installed pydantic versions.
var modelAttrs = set(
	"Config", "construct", "copy", "dict", "from_orm", "json",
	"parse_file", "parse_obj", "parse_raw", "schema", "schema_json",
	"update_forward_refs", "validate",
	"model_computed_fields", "model_config", "model_construct",
	"model_copy", "model_dump", "model_dump_json", "model_extra",
	"model_fields", "model_fields_set", "model_json_schema",
	"model_parametrized_name", "model_post_init", "model_rebuild",
	"model_validate", "model_validate_json", "model_validate_strings",
)

// moduleNames are the names every generated module defines or imports
// besides its classes; a class may not take them.
var moduleNames = set(
	"SERVER", "TOOL", "Params", "Result", "run", "run_async",
	"Any", "Dict", "List", "Literal", "Optional", "Tuple", "Union",
)

// typeNames are the names that annotations use besides class names. A field
// may not take them: annotations are evaluated with the class namespace
// in view, where such a field would shadow the type.
var typeNames = set(
	"Any", "Dict", "List", "Literal", "Optional", "Tuple", "Union",
	"str", "int", "float", "bool", "None",
)

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// maxNameLen bounds module and field names; longer names are cut and get a
// hash of the original, so they stay unique and fit in a file name.
const maxNameLen = 80

// identifier replaces every character that is not an ASCII letter, digit
// or underscore with '_'. Non-ASCII letters are replaced too: they are
// valid in Python but not portable as file names and easy to confuse.
func identifier(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

func shorten(name, original string) string {
	if len(name) <= maxNameLen {
		return name
	}
	sum := sha256.Sum256([]byte(original))
	return name[:maxNameLen-9] + "_" + hex.EncodeToString(sum[:4])
}

// moduleName maps a tool name to a Python module name: lowercase (file
// systems may fold case), identifier characters only, never a keyword or a
// dunder name such as __init__, never starting with a digit.
func moduleName(tool string) string {
	n := strings.ToLower(identifier(tool))
	switch {
	case n == "":
		n = "tool"
	case n[0] >= '0' && n[0] <= '9':
		n = "tool_" + n
	}
	if pyKeywords[n] || (strings.HasPrefix(n, "__") && strings.HasSuffix(n, "__")) {
		n += "_"
	}
	return shorten(n, tool)
}

// fieldName maps a property name to a pydantic field name. Leading
// underscores are dropped (pydantic treats such names as private), and
// names that are keywords, model attributes or type names get a '_'.
func fieldName(prop string) string {
	n := strings.TrimLeft(identifier(prop), "_")
	switch {
	case n == "":
		n = "field"
	case n[0] >= '0' && n[0] <= '9':
		n = "field_" + n
	}
	n = shorten(n, prop)
	if pyKeywords[n] || modelAttrs[n] || typeNames[n] {
		n += "_"
	}
	return n
}

// className maps a hint (a property name, a $defs key) to a CamelCase
// class name.
func className(hint string) string {
	var b strings.Builder
	up := true
	for _, r := range identifier(hint) {
		switch {
		case r == '_':
			up = true
		case up && r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
			up = false
		default:
			b.WriteRune(r)
			up = false
		}
	}
	n := b.String()
	switch {
	case n == "":
		n = "Model"
	case n[0] >= '0' && n[0] <= '9':
		n = "Model" + n
	}
	return shorten(n, hint)
}

// singular turns a plural property name into a name for one of its items:
// entities -> Entity, edits -> Edit. It is a naming nicety, not grammar.
func singular(name string) string {
	switch {
	case len(name) > 3 && strings.HasSuffix(name, "ies"):
		return name[:len(name)-3] + "y"
	case len(name) > 1 && strings.HasSuffix(name, "s") && !strings.HasSuffix(name, "ss"):
		return name[:len(name)-1]
	}
	return name + "Item"
}

// namer hands out unique names: the first taker of a name gets it, later
// ones get a numeric suffix (2, 3, ...).
type namer struct {
	taken map[string]bool
	sep   string // between the name and its number
}

func newNamer(sep string, reserved ...map[string]bool) *namer {
	n := &namer{taken: map[string]bool{}, sep: sep}
	for _, r := range reserved {
		for k := range r {
			n.taken[k] = true
		}
	}
	return n
}

func (n *namer) free(name string) bool { return !n.taken[name] }

// claim returns name if it is free, else name+sep+k for the smallest
// free k >= 2, and marks the result taken.
func (n *namer) claim(name string) string {
	out := name
	for k := 2; n.taken[out]; k++ {
		out = fmt.Sprintf("%s%s%d", name, n.sep, k)
	}
	n.taken[out] = true
	return out
}
