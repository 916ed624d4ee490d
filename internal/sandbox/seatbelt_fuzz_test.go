package sandbox

import (
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzSeatbeltProfile puts one path in each place of a policy: the
// profile is refused when the path is not absolute and clean, not UTF-8,
// or holds a control character; otherwise it reads back with the same
// forms as a profile of plain paths, and a string in it reads back as the
// path (or its glob's regex).
func FuzzSeatbeltProfile(f *testing.F) {
	for _, c := range seatbeltCases {
		p := c.policy
		for _, list := range [][]string{{p.Workspace}, p.Writable, p.ReadOnly, p.DenyRead, p.DenyWrite, p.Sockets} {
			for _, s := range list {
				f.Add(s, uint8(0))
			}
		}
	}
	for _, s := range []string{`/a")(allow default)(x "`, `/a\`, `/a\"`, `/;`, `/#|`, "/\u202e", "/a/**/b", "/a/**", "/[!\\]]"} {
		f.Add(s, uint8(5))
	}
	f.Fuzz(func(t *testing.T, p string, slot uint8) {
		slot %= 7
		deny := slot >= 5
		pol := seatbeltPolicy{Workspace: "/plain/ws"}
		plain := seatbeltPolicy{Workspace: "/plain/ws"}
		plainPath := "/plain/p"
		if deny && hasMeta(p) {
			plainPath += "/*"
		}
		put := func(pol *seatbeltPolicy, s string) {
			switch slot {
			case 0:
				pol.Workspace = s
			case 1:
				pol.Writable = []string{s}
			case 2:
				pol.HideHome = []string{s}
			case 3:
				pol.ReadOnly = []string{s}
			case 4:
				pol.Sockets = []string{s}
			case 5:
				pol.DenyRead = []string{s}
			case 6:
				pol.DenyWrite = []string{s}
			}
		}
		put(&pol, p)
		put(&plain, plainPath)
		got, err := seatbeltProfile(&pol)

		lit := p // the string the profile names p by
		if deny && hasMeta(p) {
			lit, _ = globRegex(p)
		}
		clean := path.IsAbs(p) && (path.Clean(p) == p || deny && hasMeta(p))
		safe := utf8.ValidString(lit) && !strings.ContainsFunc(lit, func(r rune) bool { return r < 0x20 || r == 0x7f })
		if !clean || !safe {
			if err == nil {
				t.Fatalf("path %q (slot %d) was accepted; want an error:\n%s", p, slot, got)
			}
			return
		}
		if err != nil {
			t.Fatalf("path %q (slot %d): %v", p, slot, err)
		}
		forms, strs, err := readSBPL(got)
		if err != nil {
			t.Fatalf("path %q (slot %d): the profile does not read back: %v\n%s", p, slot, err, got)
		}
		want, err := seatbeltProfile(&plain)
		if err != nil {
			t.Fatal(err)
		}
		wantForms, _, _ := readSBPL(want)
		// Ancestor rules depend on how deep the paths are: compare the
		// forms before them.
		cut := func(fs []string) []string {
			if i := slices.Index(fs, "deny file-write-unlink literal"); i >= 0 {
				return fs[:i]
			}
			return fs
		}
		if !slices.Equal(cut(forms), cut(wantForms)) {
			t.Fatalf("path %q (slot %d) changed the profile's forms:\n got %q\nwant %q", p, slot, cut(forms), cut(wantForms))
		}
		if !slices.Contains(strs, lit) {
			t.Fatalf("path %q (slot %d): no string in the profile reads back as %q", p, slot, lit)
		}
	})
}

// FuzzGlobRegex: in a glob's regex, the glob's literal text matches only
// itself, and "*" matches any run of characters but "/".
func FuzzGlobRegex(f *testing.F) {
	for _, s := range []string{"plain", "a.b", `re.ga$x^+{1}|y\z`, "(parens)", "]", "a]b", `\`, "ünï cödé", "^$", "a|b", "x+"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, lit string) {
		if hasMeta(lit) || strings.Contains(lit, "/") || !utf8.ValidString(lit) {
			return // the literal part only: no glob characters, one path element
		}
		glob := "/d/" + lit + "/*.k"
		re, err := globRegex(glob)
		if err != nil {
			t.Fatalf("globRegex(%q): %v", glob, err)
		}
		rx, err := regexp.Compile(re)
		if err != nil {
			t.Fatalf("globRegex(%q) = %q, which does not compile: %v", glob, re, err)
		}
		for _, p := range []string{"/d/" + lit + "/a.k", "/d/" + lit + "/.k", "/d/" + lit + "/a b*?.k"} {
			if !rx.MatchString(p) {
				t.Errorf("%q (from %q) does not match %q", re, glob, p)
			}
		}
		for _, p := range []string{"/d/" + lit + "/a/b.k", "/d/" + lit + "x/a.k", "/d/" + lit + "/a.kx", "x/d/" + lit + "/a.k"} {
			if rx.MatchString(p) {
				t.Errorf("%q (from %q) matches %q", re, glob, p)
			}
		}
		// Each character of the literal stands for itself only.
		for i, r := range lit {
			for _, other := range []rune{'x', '.', '\\', '/'} {
				if other == r {
					continue
				}
				p := "/d/" + lit[:i] + string(other) + lit[i+utf8.RuneLen(r):] + "/a.k"
				if rx.MatchString(p) {
					t.Errorf("%q (from %q) matches %q", re, glob, p)
				}
			}
		}
	})
}
