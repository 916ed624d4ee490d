package mcpserver

import (
	"context"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The go-sdk validates a tool's arguments against its input schema and
// answers with the validator's chain of messages:
//
//	validating "arguments": validating root: validating /properties/timeout:
//	exclusiveMinimum: -5/1 is less than or equal to 0.000000
//
// and a null value shows as "<invalid reflect.Value>". plainValidation
// says the same in words that name the argument and the rule:
//
//	timeout must be greater than 0 (got -5)

const sdkValidationPrefix = `validating "arguments": `

var (
	validatingPath = regexp.MustCompile(`validating (/[^:]*): `)
	reType         = regexp.MustCompile(`^type: (.*) has type "([a-z]+)", want (?:one of )?(.+)$`)
	reRequired     = regexp.MustCompile(`^required: missing properties: \[(.*)\]$`)
	reExtra        = regexp.MustCompile(`^unexpected additional properties \[(.*)\]$`)
	reBound        = regexp.MustCompile(`^(minimum|maximum|exclusiveMinimum|exclusiveMaximum): (\S+) is [a-z ]+ than (?:or equal to )?(\S+)$`)
	reEnum         = regexp.MustCompile(`^enum: (.*) does not equal any of: \[(.*)\]$`)
	reLength       = regexp.MustCompile(`^(minLength|maxLength): .* contains (\d+) Unicode code points, (?:fewer|more) than (\d+)$`)
	quotedName     = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)
)

var boundWords = map[string]string{
	"minimum":          "at least",
	"maximum":          "at most",
	"exclusiveMinimum": "greater than",
	"exclusiveMaximum": "less than",
}

// plainValidation rewrites a go-sdk argument validation message for tool,
// or returns ok false when msg is not one.
func plainValidation(tool, msg string) (string, bool) {
	rest, ok := strings.CutPrefix(msg, sdkValidationPrefix)
	if !ok {
		return "", false
	}
	rest = strings.TrimPrefix(rest, "validating root: ")
	path := ""
	for {
		m := validatingPath.FindStringSubmatchIndex(rest)
		if m == nil || m[0] != 0 {
			break
		}
		path = rest[m[2]:m[3]]
		rest = rest[m[1]:]
	}
	name := argName(path)
	subject := "argument " + name
	if name == "" {
		subject = "the arguments"
	}
	var what string
	switch {
	case reType.MatchString(rest):
		m := reType.FindStringSubmatch(rest)
		want := strings.Join(quotedNames(m[3]), " or ")
		what = fmt.Sprintf("%s must be %s, not %s", subject, article(want), m[2])
		if m[2] != "null" && m[2] != "object" && m[2] != "array" {
			what += " (" + clip(m[1]) + ")"
		}
	case reRequired.MatchString(rest):
		names := quotedNames(reRequired.FindStringSubmatch(rest)[1])
		what = "missing required argument " + strings.Join(prefixed(name, names), ", ")
	case reExtra.MatchString(rest):
		names := quotedNames(reExtra.FindStringSubmatch(rest)[1])
		what = "unknown argument " + strings.Join(prefixed(name, names), ", ") + " (see the tool's input schema for the arguments it takes)"
	case reBound.MatchString(rest):
		m := reBound.FindStringSubmatch(rest)
		what = fmt.Sprintf("%s must be %s %s (got %s)", subject, boundWords[m[1]], number(m[3]), number(m[2]))
	case reEnum.MatchString(rest):
		m := reEnum.FindStringSubmatch(rest)
		what = fmt.Sprintf("%s must be one of %s (got %s)", subject, m[2], clip(m[1]))
	case reLength.MatchString(rest):
		m := reLength.FindStringSubmatch(rest)
		bound := "at least"
		if m[1] == "maxLength" {
			bound = "at most"
		}
		what = fmt.Sprintf("%s must have %s %s characters (it has %s)", subject, bound, m[3], m[2])
	default:
		what = fmt.Sprintf("%s: %s", subject, strings.ReplaceAll(rest, "<invalid reflect.Value>", "null"))
	}
	return fmt.Sprintf("invalid arguments for %s: %s", tool, what), true
}

// argName turns /properties/a/properties/b/items/0 into a.b[0].
func argName(path string) string {
	var b strings.Builder
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i := 0; i < len(parts); i++ {
		switch parts[i] {
		case "properties":
			if i+1 < len(parts) {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(parts[i+1])
				i++
			}
		case "items", "":
		default:
			if _, err := strconv.Atoi(parts[i]); err == nil {
				b.WriteString("[" + parts[i] + "]")
			}
		}
	}
	return b.String()
}

func quotedNames(s string) []string {
	var out []string
	for _, m := range quotedName.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	if out == nil && s != "" {
		out = []string{strings.Trim(s, `"`)}
	}
	return out
}

func prefixed(parent string, names []string) []string {
	if parent == "" {
		return names
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = parent + "." + n
	}
	return out
}

// number prints a validator's number (a rational such as -5/1, or a
// float such as 0.000000) the short way.
func number(s string) string {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return s
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func article(typ string) string {
	switch {
	case typ == "":
		return "of another type"
	case strings.ContainsRune("aeiou", rune(typ[0])):
		return "an " + typ
	}
	return "a " + typ
}

func clip(v string) string {
	if len(v) > 60 {
		return v[:60] + "..."
	}
	return v
}

// plainValidationMiddleware rewrites argument validation errors of
// tools/call in words.
func plainValidationMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method != "tools/call" || err != nil {
			return res, err
		}
		r, ok := res.(*mcp.CallToolResult)
		if !ok || !r.IsError || len(r.Content) != 1 {
			return res, err
		}
		tc, ok := r.Content[0].(*mcp.TextContent)
		if !ok {
			return res, err
		}
		tool := "the tool"
		if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
			tool = p.Name
		}
		if plain, ok := plainValidation(tool, tc.Text); ok {
			r.Content = []mcp.Content{&mcp.TextContent{Text: plain}}
		}
		return res, err
	}
}
