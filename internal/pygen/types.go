package pygen

import (
	"sort"
	"strings"
)

// pyType is a Python type expression. It renders two ways: with typing
// names for the generated code (valid from Python 3.8 on, under pydantic 1
// and 2), and in the modern spelling for the signature an agent reads.
type pyType struct {
	kind kind
	name string    // tPrim: str, int, float, bool; tClass: the class name
	args []*pyType // tList, tDict (value), tTuple, tUnion
	lits []string  // tLiteral: Python literals
	why  string    // tAny: why the schema became Any ("" for a plain Any)
}

type kind int

const (
	tAny kind = iota
	tNone
	tPrim
	tClass
	tList
	tDict
	tTuple
	tUnion
	tLiteral
)

var (
	anyType  = &pyType{kind: tAny}
	noneType = &pyType{kind: tNone}
)

func prim(name string) *pyType { return &pyType{kind: tPrim, name: name} }

func anyBecause(why string) *pyType { return &pyType{kind: tAny, why: why} }

// union builds a Union, flattened and without repeats. A union with Any
// is Any; a single member is itself; None goes last so that it renders
// as Optional[X].
func union(members ...*pyType) *pyType {
	var flat []*pyType
	seen := map[string]bool{}
	hasNone := false
	var add func(t *pyType)
	add = func(t *pyType) {
		switch t.kind {
		case tUnion:
			for _, a := range t.args {
				add(a)
			}
		case tNone:
			hasNone = true
		default:
			if k := t.code(nil); !seen[k] {
				seen[k] = true
				flat = append(flat, t)
			}
		}
	}
	for _, m := range members {
		add(m)
	}
	for _, t := range flat {
		if t.kind == tAny {
			return t
		}
	}
	if hasNone {
		flat = append(flat, noneType)
	}
	if len(flat) == 1 {
		return flat[0]
	}
	if len(flat) == 0 {
		return anyBecause("empty union")
	}
	return &pyType{kind: tUnion, args: flat}
}

func optional(t *pyType) *pyType { return union(t, noneType) }

// nullable reports whether None is a valid value of t.
func (t *pyType) nullable() bool {
	switch t.kind {
	case tAny, tNone:
		return true
	case tUnion:
		return t.args[len(t.args)-1].kind == tNone
	case tLiteral:
		for _, l := range t.lits {
			if l == "None" {
				return true
			}
		}
	}
	return false
}

// base returns t without None, for deciding which constraints apply.
func (t *pyType) base() *pyType {
	if t.kind == tUnion && len(t.args) == 2 && t.args[1].kind == tNone {
		return t.args[0]
	}
	return t
}

// code renders t for the generated module and records the typing names it
// uses in imports (which may be nil).
func (t *pyType) code(imports map[string]bool) string {
	use := func(n string) string {
		if imports != nil {
			imports[n] = true
		}
		return n
	}
	switch t.kind {
	case tAny:
		return use("Any")
	case tNone:
		return "None"
	case tPrim, tClass:
		return t.name
	case tList:
		return use("List") + "[" + t.args[0].code(imports) + "]"
	case tDict:
		return use("Dict") + "[str, " + t.args[0].code(imports) + "]"
	case tTuple:
		return use("Tuple") + "[" + joinTypes(t.args, imports) + "]"
	case tLiteral:
		return use("Literal") + "[" + strings.Join(t.lits, ", ") + "]"
	case tUnion:
		if len(t.args) == 2 && t.args[1].kind == tNone {
			return use("Optional") + "[" + t.args[0].code(imports) + "]"
		}
		return use("Union") + "[" + joinTypes(t.args, imports) + "]"
	}
	panic("pygen: unknown type kind")
}

func joinTypes(ts []*pyType, imports map[string]bool) string {
	s := make([]string, len(ts))
	for i, a := range ts {
		s[i] = a.code(imports)
	}
	return strings.Join(s, ", ")
}

// sig renders t the way a reader writes it today: list[str], int | None.
func (t *pyType) sig() string {
	switch t.kind {
	case tAny:
		return "Any"
	case tNone:
		return "None"
	case tPrim, tClass:
		return t.name
	case tList:
		return "list[" + t.args[0].sig() + "]"
	case tDict:
		return "dict[str, " + t.args[0].sig() + "]"
	case tTuple:
		s := make([]string, len(t.args))
		for i, a := range t.args {
			s[i] = a.sig()
		}
		return "tuple[" + strings.Join(s, ", ") + "]"
	case tLiteral:
		return "Literal[" + strings.Join(t.lits, ", ") + "]"
	case tUnion:
		s := make([]string, len(t.args))
		for i, a := range t.args {
			s[i] = a.sig()
		}
		return strings.Join(s, " | ")
	}
	panic("pygen: unknown type kind")
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
