package ipybox_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/container"
	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/mcpconn"
	"github.com/ipybox/ipybox/internal/pygen"
	"github.com/ipybox/ipybox/internal/sandbox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// maxPublic bounds the public API: the exported identifiers of the two
// public packages, ipybox and mcpserver (package-level names, and the
// exported methods of exported types). Past it, fold or unexport before
// adding: every name is one more a user has to learn, and one more that
// cannot change.
const maxPublic = 150

// exported lists a package's exported identifiers, as "Name" or
// "Type.Method", from its non-test files for every system.
func exported(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			out = append(out, exportedIn(d)...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func exportedIn(d ast.Decl) []string {
	var out []string
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			break
		}
		if d.Recv == nil {
			out = append(out, d.Name.Name)
			break
		}
		typ := d.Recv.List[0].Type
		if s, ok := typ.(*ast.StarExpr); ok {
			typ = s.X
		}
		if id, ok := typ.(*ast.Ident); ok && id.IsExported() {
			out = append(out, id.Name+"."+d.Name.Name)
		}
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if s.Name.IsExported() {
					name := s.Name.Name
					if s.Assign.IsValid() {
						name += " (an alias)"
					}
					out = append(out, name)
				}
			case *ast.ValueSpec:
				for _, n := range s.Names {
					if n.IsExported() {
						out = append(out, n.Name)
					}
				}
			}
		}
	}
	return out
}

// TestPublicSurface keeps the public API at or under maxPublic
// identifiers, and free of type aliases (a public type is defined where
// it is public, so that go doc shows its fields).
func TestPublicSurface(t *testing.T) {
	root := testenv.RepoRoot(t)
	var all []string
	for _, pkg := range []string{".", "mcpserver"} {
		ids := exported(t, filepath.Join(root, pkg))
		if len(ids) < 20 {
			t.Fatalf("%s: found %d exported identifiers; is the parse finding the code?", pkg, len(ids))
		}
		t.Logf("%s: %d exported identifiers", pkg, len(ids))
		all = append(all, ids...)
	}
	for _, id := range all {
		if strings.HasSuffix(id, " (an alias)") {
			t.Errorf("%s: a public type is defined where it is public, so that go doc shows its fields; define it, and convert at the seam", id)
		}
	}
	if len(all) > maxPublic {
		t.Errorf("%d exported identifiers in ipybox and mcpserver, over %d: fold or unexport before adding\n%s", len(all), maxPublic, strings.Join(all, " "))
	}
	t.Logf("%d exported identifiers in all", len(all))
}

// TestPublicTypesMirrorInternal: the public types that are converted to an
// internal package's at the seam have every field the internal one has
// (by name, and by JSON key where they have one), so that a field added
// inside is not silently dropped on the way in.
func TestPublicTypesMirrorInternal(t *testing.T) {
	for _, c := range []struct {
		pub, internal any
		skip          map[string]bool // internal fields with no public twin, and why
	}{
		{ipybox.SandboxConfig{}, sandbox.Config{}, map[string]bool{"Ignored": true}},        // Ignored: the keys a parse skipped, for its log
		{ipybox.GatewayConfig{}, kernel.GatewayConfig{}, map[string]bool{"Protocol": true}}, // Protocol: LegacyProtocol
		{ipybox.ContainerBind{}, container.Bind{}, nil},
		{ipybox.ServerConfig{}, mcpconn.Config{}, nil},
		{ipybox.OAuthConfig{}, mcpconn.OAuthConfig{}, nil},
		{ipybox.ToolModule{}, pygen.Module{}, nil},
		{ipybox.Result{}, kernel.Result{}, nil},
		{ipybox.Display{}, kernel.Display{}, nil},
		{ipybox.Output{}, kernel.Output{}, nil},
		{ipybox.ClearOutput{}, kernel.ClearOutput{}, nil},
		{ipybox.PythonError{}, kernel.PythonError{}, nil},
		{ipybox.TimeoutError{}, kernel.TimeoutError{}, nil},
		{ipybox.DiedError{}, kernel.DiedError{}, nil},
	} {
		mirrors(t, reflect.TypeOf(c.pub), reflect.TypeOf(c.internal), c.skip)
	}
}

func mirrors(t *testing.T, pub, internal reflect.Type, skip map[string]bool) {
	t.Helper()
	for i := range internal.NumField() {
		f := internal.Field(i)
		if !f.IsExported() || skip[f.Name] {
			continue
		}
		p, ok := pub.FieldByName(f.Name)
		if !ok {
			t.Errorf("%s has no field %s, which %s has: add it, and convert it at the seam", pub, f.Name, internal)
			continue
		}
		if p.Tag.Get("json") != f.Tag.Get("json") {
			t.Errorf("%s.%s has JSON tag %q, %s's has %q", pub, f.Name, p.Tag.Get("json"), internal, f.Tag.Get("json"))
		}
		if p.Type.Kind() == reflect.Struct && f.Type.Kind() == reflect.Struct && p.Type.PkgPath() != "time" {
			mirrors(t, p.Type, f.Type, nil)
		}
	}
}

// TestSandboxConfigRoundTrip: the public policy reads and writes the
// settings format the sandbox package reads, field for field. (The
// sandbox package's parser refuses limits.fileSize today, so it is left
// out.)
func TestSandboxConfigRoundTrip(t *testing.T) {
	in := `{"filesystem":{"denyRead":["~/.ssh"],"allowWrite":["/data"],"denyWrite":["/data/ro"]},"network":{"allowedDomains":["pypi.org"],"deniedDomains":["evil.example"]},"rootMode":"host","extraRead":["/opt/x"],"landlock":true,"blockUnixSockets":true,"limits":{"memory":1073741824,"pids":64}}`
	internal, err := sandbox.ParseConfig([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var pub ipybox.SandboxConfig
	if err := json.Unmarshal([]byte(in), &pub); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(internal)
	b, _ := json.Marshal(&pub)
	if string(a) != string(b) {
		t.Errorf("the sandbox package writes\n%s\nthe public type\n%s", a, b)
	}
}
