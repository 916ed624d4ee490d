package pygen

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// maxTypeDepth bounds how deeply type expressions nest (List[List[...]]),
// and so how long $ref and allOf chains are followed. Python's parser
// refuses deeply nested brackets, and no real tool nests this deep.
const maxTypeDepth = 24

// maxLiteralDepth bounds the nesting of a rendered default value.
const maxLiteralDepth = 16

// class is one generated pydantic model.
type class struct {
	name  string
	doc   string
	extra string // pydantic's extra mode: "allow", "forbid" or "ignore"
	props []*prop
}

// prop is one field of a class.
type prop struct {
	original string // the property name in the schema (the alias)
	field    string // the Python field name, assigned after all classes exist
	typ      *pyType
	required bool        // no default: the caller must pass it
	send     bool        // the schema requires it: sent even when the caller left its default
	def      string      // the default as a Python literal, when !required
	desc     string      // the schema's description
	kwargs   [][2]string // Field keyword arguments for constraints
	pattern  string      // a regex constraint, applied through _pattern
	items    [2]string   // minItems and maxItems, applied through _items ("" = none)
	notes    []string    // comments: what the generator left out and why
}

// gen turns the schemas of one tool into classes.
type gen struct {
	classes []*class
	names   *namer
	byObj   map[*object]*class // a schema object's class, so $ref cycles end
	expand  map[*object]bool   // non-class $ref targets being expanded
	root    *object            // what "#" refers to
	input   bool               // building Params (true) or Result (false)
}

func newGen() *gen {
	return &gen{
		names:  newNamer("", moduleNames, pyKeywords),
		byObj:  map[*object]*class{},
		expand: map[*object]bool{},
	}
}

// rootClass builds Params or Result from a whole schema. A root is always
// a class, even when the schema is empty or not an object schema.
func (g *gen) rootClass(name string, schema any, input bool) *class {
	g.input = input
	g.root, _ = schema.(*object)
	g.names.taken[name] = true // Params and Result are reserved for the roots
	c := &class{name: name, extra: "allow"}
	g.classes = append(g.classes, c)
	o := g.root
	if o != nil {
		g.byObj[o] = c
		// A root that is a $ref or an allOf describes its object elsewhere.
		for i := 0; i < maxTypeDepth && o != nil && (o.has("$ref") || o.has("allOf")); i++ {
			if ref := o.str("$ref"); ref != "" {
				o, _ = g.resolve(ref).(*object)
			} else {
				o = g.merge(o, o.list("allOf"), "allOf")
			}
			if o != nil {
				g.byObj[o] = c
			}
		}
	}
	if o == nil {
		c.doc = "The tool's schema is not an object schema; any fields are accepted."
		return c
	}
	g.fill(c, o)
	return c
}

// fill sets the doc, extra mode and fields of c from an object schema.
func (g *gen) fill(c *class, o *object) {
	if c.doc == "" {
		// Titles are not used: generated schemas set them to class or
		// property names, which say nothing a docstring should repeat.
		c.doc = o.str("description")
	}
	if ap, ok := o.get("additionalProperties"); ok && ap == false {
		// Strict in what we send: a misspelt parameter fails here, not
		// silently on the server. Lenient in what we accept: a server that
		// adds a result field does not break its callers.
		if g.input {
			c.extra = "forbid"
		} else {
			c.extra = "ignore"
		}
	}
	required := map[string]bool{}
	for _, r := range o.list("required") {
		if s, ok := r.(string); ok {
			required[s] = true
		}
	}
	props := o.obj("properties")
	if props == nil {
		return
	}
	for _, name := range props.keys {
		c.props = append(c.props, g.prop(name, props.vals[name], required[name]))
	}
}

func (g *gen) prop(name string, schema any, required bool) *prop {
	p := &prop{original: name, required: required, send: required}
	p.typ = g.typeOf(schema, name, 0)
	o, _ := schema.(*object)
	p.desc = o.str("description")
	if v, ok := o.get("default"); ok {
		if lit, ok := literal(v, 0); ok {
			p.required = false
			p.def = lit
			if v == nil {
				p.typ = optional(p.typ)
			}
		} else {
			p.notes = append(p.notes, "default left out: nested too deeply")
		}
	}
	if p.def == "" {
		// A const needs no value from the caller: it gets the constant as
		// its default, which dump_params sends (_ipybox_send, below).
		if c, ok := o.get("const"); ok && c != nil {
			if lit, ok := literal(c, 0); ok && p.typ.kind == tLiteral {
				p.required, p.def, p.send = false, lit, true
			}
		}
	}
	if !p.required && p.def == "" {
		p.typ = optional(p.typ)
		p.def = "None"
	}
	if o != nil {
		g.constraints(p, o)
	}
	if t := p.typ.base(); t.kind == tAny && t.why != "" {
		p.notes = append(p.notes, "Any: "+t.why)
	} else if t.kind == tList && t.args[0].kind == tAny && t.args[0].why != "" {
		p.notes = append(p.notes, "List[Any]: "+t.args[0].why)
	}
	if len(o.list("enum")) > 0 && p.typ.base().kind != tLiteral && p.typ.kind != tNone {
		p.notes = append(p.notes, "enum not checked here: Literal holds only strings, integers, booleans and None")
	}
	return p
}

// typeOf maps a schema to a Python type. hint names a class made on the
// way. It never fails: what it does not understand becomes Any, with the
// reason kept for a comment.
func (g *gen) typeOf(schema any, hint string, depth int) *pyType {
	if depth > maxTypeDepth {
		return anyBecause("schema nested too deeply")
	}
	switch s := schema.(type) {
	case nil, bool:
		if s == false {
			return anyBecause("the schema false accepts no value")
		}
		return anyType
	case *object:
		return g.objectType(s, hint, depth)
	}
	return anyBecause("schema is not an object")
}

func (g *gen) objectType(o *object, hint string, depth int) *pyType {
	if c := g.byObj[o]; c != nil {
		return &pyType{kind: tClass, name: c.name}
	}
	if ref := o.str("$ref"); ref != "" {
		return g.refType(ref, depth)
	}
	if parts := o.list("allOf"); len(parts) > 0 {
		return g.typeOf(g.merge(o, parts, "allOf"), hint, depth+1)
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		if branches := o.list(kw); len(branches) > 0 {
			if t := g.unionType(o, kw, branches, hint, depth); t != nil {
				return t
			}
		}
	}
	if vals := o.list("enum"); vals != nil {
		if t := literalType(vals); t != nil {
			return t
		}
	}
	if v, ok := o.get("const"); ok {
		if t := literalType([]any{v}); t != nil {
			return t
		}
	}
	switch ty := o.vals["type"].(type) {
	case string:
		return g.typeNamed(ty, o, hint, depth)
	case []any:
		var alts []*pyType
		for _, t := range ty {
			name, _ := t.(string)
			alts = append(alts, g.typeNamed(name, o, hint, depth))
		}
		return union(alts...)
	case nil:
		switch {
		case o.has("properties") || o.has("additionalProperties") || o.has("patternProperties"):
			return g.typeNamed("object", o, hint, depth)
		case o.has("items") || o.has("prefixItems"):
			return g.typeNamed("array", o, hint, depth)
		}
		return anyType
	}
	return anyBecause("type is neither a string nor a list")
}

// typeNamed maps one JSON Schema type name, with the keywords of o.
func (g *gen) typeNamed(name string, o *object, hint string, depth int) *pyType {
	switch name {
	case "string":
		return prim("str")
	case "integer":
		return prim("int")
	case "number":
		return prim("float")
	case "boolean":
		return prim("bool")
	case "null":
		return noneType
	case "array":
		return g.arrayType(o, hint, depth)
	case "object":
		return g.objType(o, hint, depth)
	}
	return anyBecause("unknown type " + pyStr(name))
}

func (g *gen) arrayType(o *object, hint string, depth int) *pyType {
	// The tuple forms: 2020-12 has prefixItems, and items for the rest;
	// earlier drafts have an items array, and additionalItems for the rest.
	prefix := o.list("prefixItems")
	rest, restOK := o.get("items")
	if prefix == nil {
		if l, ok := rest.([]any); ok {
			prefix = l
			rest, restOK = o.get("additionalItems")
		}
	}
	if prefix != nil {
		// A tuple is exact when nothing may follow its prefix.
		maxItems, _ := o.num("maxItems")
		if (restOK && rest == false) || maxItems.String() == strconv.Itoa(len(prefix)) {
			if len(prefix) == 0 {
				return anyBecause("empty tuple")
			}
			elems := make([]*pyType, len(prefix))
			for i, s := range prefix {
				elems[i] = g.typeOf(s, fmt.Sprintf("%sItem%d", hint, i+1), depth+1)
			}
			return &pyType{kind: tTuple, args: elems}
		}
		return &pyType{kind: tList, args: []*pyType{anyBecause("a tuple of open length")}}
	}
	if !restOK {
		return &pyType{kind: tList, args: []*pyType{anyType}}
	}
	return &pyType{kind: tList, args: []*pyType{g.typeOf(rest, singular(hint), depth+1)}}
}

func (g *gen) objType(o *object, hint string, depth int) *pyType {
	if props := o.obj("properties"); props != nil && len(props.keys) > 0 {
		c := &class{name: g.names.claim(className(hint)), extra: "allow"}
		g.classes = append(g.classes, c)
		g.byObj[o] = c
		g.fill(c, o)
		return &pyType{kind: tClass, name: c.name}
	}
	if o.has("patternProperties") {
		return &pyType{kind: tDict, args: []*pyType{anyBecause("patternProperties")}}
	}
	ap, _ := o.get("additionalProperties")
	if ap == nil || ap == true || ap == false {
		return &pyType{kind: tDict, args: []*pyType{anyType}}
	}
	return &pyType{kind: tDict, args: []*pyType{g.typeOf(ap, hint+"Value", depth+1)}}
}

// unionType maps anyOf/oneOf. Keywords beside the branches apply to every
// branch (A and (B or C) is (A and B) or (A and C)). Branches that carry
// no type information at all (say, alternative "required" lists) only
// constrain the base, so the base is used: nil is returned.
func (g *gen) unionType(o *object, kw string, branches []any, hint string, depth int) *pyType {
	typed := false
	for _, b := range branches {
		if bo, ok := b.(*object); !ok || hasTypeInfo(bo) {
			typed = true
		}
	}
	if !typed && hasTypeInfo(o) {
		return nil
	}
	base := newObject()
	for _, k := range o.keys {
		if k != kw && k != "description" && k != "title" && k != "default" {
			base.set(k, o.vals[k])
		}
	}
	withBase := len(base.keys) > 0 && hasTypeInfo(base)
	alts := make([]*pyType, 0, len(branches))
	for i, b := range branches {
		bhint := fmt.Sprintf("%s%d", hint, i+1)
		if withBase {
			b = g.merge(base, []any{b}, kw)
		}
		alts = append(alts, g.typeOf(b, bhint, depth+1))
	}
	return union(alts...)
}

// typeKeywords are the keywords that say what kind of value a schema holds.
var typeKeywords = []string{
	"type", "$ref", "properties", "items", "prefixItems", "enum", "const",
	"anyOf", "oneOf", "allOf", "additionalProperties",
}

func hasTypeInfo(o *object) bool {
	for _, k := range typeKeywords {
		if o.has(k) {
			return true
		}
	}
	return false
}

// refType maps a $ref. Object targets become (shared) classes; other
// targets are expanded in place, unless they refer back to themselves.
func (g *gen) refType(ref string, depth int) *pyType {
	target := g.resolve(ref)
	t, ok := target.(*object)
	if !ok {
		if target == nil {
			return anyBecause("unresolved $ref " + pyStr(ref))
		}
		return g.typeOf(target, "", depth+1)
	}
	if c := g.byObj[t]; c != nil {
		return &pyType{kind: tClass, name: c.name}
	}
	hint := ref[strings.LastIndexByte(ref, '/')+1:]
	if h, err := url.PathUnescape(hint); err == nil {
		hint = h
	}
	if g.expand[t] {
		return anyBecause("recursive $ref " + pyStr(ref) + " without an object in between")
	}
	g.expand[t] = true
	defer delete(g.expand, t)
	return g.typeOf(t, hint, depth+1)
}

// resolve follows a local JSON pointer ("#", "#/$defs/Node"). Remote
// references and anchors are not followed: they return nil.
func (g *gen) resolve(ref string) any {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok || g.root == nil {
		return nil
	}
	if f, err := url.PathUnescape(frag); err == nil {
		frag = f
	}
	if frag == "" {
		return g.root
	}
	if !strings.HasPrefix(frag, "/") {
		return nil // an anchor
	}
	var cur any = g.root
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case *object:
			v, ok := c.get(tok)
			if !ok {
				return nil
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil
			}
			cur = c[i]
		default:
			return nil
		}
	}
	return cur
}

// merge combines base (without the keyword kw) and parts into one schema:
// properties and required lists are joined, otherwise the first value of
// a keyword wins. $ref parts are followed first.
func (g *gen) merge(base *object, parts []any, kw string) *object {
	out := newObject()
	add := func(o *object, skip string) {
		for _, k := range o.keys {
			v := o.vals[k]
			switch {
			case k == skip:
			case k == "properties":
				props, _ := v.(*object)
				if props == nil {
					continue
				}
				dst := out.obj("properties")
				if dst == nil {
					dst = newObject()
					out.set("properties", dst)
				}
				for _, pk := range props.keys {
					if !dst.has(pk) {
						dst.set(pk, props.vals[pk])
					}
				}
			case k == "required":
				out.set("required", append(out.list("required"), o.list("required")...))
			case !out.has(k):
				out.set(k, v)
			}
		}
	}
	add(base, kw)
	for _, p := range parts {
		po, _ := p.(*object)
		for i := 0; po != nil && po.has("$ref") && i < maxTypeDepth; i++ {
			po, _ = g.resolve(po.str("$ref")).(*object)
		}
		if po != nil {
			add(po, "$ref")
		}
	}
	return out
}

// literalType maps enum or const values to Literal[...]. Values that
// Literal cannot hold (floats, arrays, objects) make it return nil, and the
// schema's type is used instead.
func literalType(vals []any) *pyType {
	if len(vals) == 0 {
		return anyBecause("empty enum")
	}
	var lits []string
	seen := map[string]bool{}
	null := false
	for _, v := range vals {
		var lit string
		switch v := v.(type) {
		case nil:
			null = true
			continue
		case string:
			lit = pyStr(v)
		case bool:
			lit, _ = literal(v, 0)
		case json.Number:
			if !intRE.MatchString(v.String()) {
				return nil
			}
			lit = v.String()
		default:
			return nil
		}
		if !seen[lit] {
			seen[lit] = true
			lits = append(lits, lit)
		}
	}
	if len(lits) == 0 {
		return noneType
	}
	t := &pyType{kind: tLiteral, lits: lits}
	if null {
		return optional(t)
	}
	return t
}

var intRE = regexp.MustCompile(`^-?[0-9]+$`)

// literal renders a JSON value as a Python literal.
func literal(v any, depth int) (string, bool) {
	if depth > maxLiteralDepth {
		return "", false
	}
	switch v := v.(type) {
	case nil:
		return "None", true
	case bool:
		if v {
			return "True", true
		}
		return "False", true
	case json.Number:
		// JSON's number grammar is a subset of Python's float and int
		// literals, and the decoder has checked it.
		return v.String(), true
	case string:
		return pyStr(v), true
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			s, ok := literal(e, depth+1)
			if !ok {
				return "", false
			}
			parts[i] = s
		}
		return "[" + strings.Join(parts, ", ") + "]", true
	case *object:
		parts := make([]string, len(v.keys))
		for i, k := range v.keys {
			s, ok := literal(v.vals[k], depth+1)
			if !ok {
				return "", false
			}
			parts[i] = pyStr(k) + ": " + s
		}
		return "{" + strings.Join(parts, ", ") + "}", true
	}
	return "", false
}

// constraints moves validation keywords to Field arguments, but only onto
// types they apply to: pydantic 1 refuses a constraint it cannot enforce
// (say, ge on a Union), and the module would not import.
func (g *gen) constraints(p *prop, o *object) {
	base := p.typ.base()
	number := func(kw string) (string, bool) {
		n, ok := o.num(kw)
		return n.String(), ok
	}
	count := func(kw string) (string, bool) {
		n, ok := o.num(kw)
		if !ok || !intRE.MatchString(n.String()) || strings.HasPrefix(n.String(), "-") {
			return "", false
		}
		return n.String(), true
	}
	switch {
	case base.kind == tPrim && (base.name == "int" || base.name == "float"):
		for _, c := range []struct{ kw, exclKw, incl, excl string }{
			{"minimum", "exclusiveMinimum", "ge", "gt"},
			{"maximum", "exclusiveMaximum", "le", "lt"},
		} {
			exclKw := c.exclKw
			if ex, ok := number(exclKw); ok { // draft 6 and later: a number
				p.kwargs = append(p.kwargs, [2]string{c.excl, ex})
			} else if n, ok := number(c.kw); ok {
				arg := c.incl
				if flag, _ := o.get(exclKw); flag == true { // draft 4: a flag
					arg = c.excl
				}
				p.kwargs = append(p.kwargs, [2]string{arg, n})
			}
		}
		if n, ok := number("multipleOf"); ok && n != "0" {
			p.kwargs = append(p.kwargs, [2]string{"multiple_of", n})
		}
	case base.kind == tPrim && base.name == "str":
		if n, ok := count("minLength"); ok {
			p.kwargs = append(p.kwargs, [2]string{"min_length", n})
		}
		if n, ok := count("maxLength"); ok {
			p.kwargs = append(p.kwargs, [2]string{"max_length", n})
		}
		if pat, ok := o.get("pattern"); ok {
			if s, ok := pat.(string); ok {
				p.pattern = s
			}
		}
	case base.kind == tList:
		p.items[0], _ = count("minItems")
		p.items[1], _ = count("maxItems")
	}
}
