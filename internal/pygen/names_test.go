package pygen

import (
	"strings"
	"testing"
)

func TestModuleName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"read_file", "read_file"},
		{"tool-1", "tool_1"},
		{"Tool.One", "tool_one"},
		{"class", "class_"},
		{"async", "async_"},
		{"None", "none"},
		{"1st", "tool_1st"},
		{"", "tool"},
		{"__init__", "__init___"},
		{"__main__", "__main___"},
		{"_private", "_private"},
		{"../etc/passwd", "___etc_passwd"},
		{"a/b", "a_b"},
		{"ünï", "_n_"},
		{"x\x00y", "x_y"},
		{strings.Repeat("a", 100), strings.Repeat("a", 71) + "_28165978"},
	} {
		if got := moduleName(tc.in); got != tc.want {
			t.Errorf("moduleName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestFieldName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"path", "path"},
		{"entityType", "entityType"},
		{"from", "from_"},
		{"class", "class_"},
		{"user-id", "user_id"},
		{"schema", "schema_"},
		{"json", "json_"},
		{"model_config", "model_config_"},
		{"copy", "copy_"},
		{"Config", "Config_"},
		{"_meta", "meta"},
		{"__root__", "root__"},
		{"str", "str_"},
		{"Optional", "Optional_"},
		{"type", "type"},
		{"1abc", "field_1abc"},
		{"", "field"},
		{"___", "field"},
		{"a b", "a_b"},
		{"None", "None_"},
	} {
		if got := fieldName(tc.in); got != tc.want {
			t.Errorf("fieldName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestClassName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"entity", "Entity"},
		{"entityType", "EntityType"},
		{"user-id", "UserId"},
		{"with space", "WithSpace"},
		{"2d", "Model2d"},
		{"", "Model"},
		{"\"; import os; \"", "ImportOs"},
	} {
		if got := className(tc.in); got != tc.want {
			t.Errorf("className(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSingular(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"entities", "entity"}, {"edits", "edit"}, {"address", "addressItem"}, {"content", "contentItem"}, {"s", "sItem"},
	} {
		if got := singular(tc.in); got != tc.want {
			t.Errorf("singular(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPyStr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", `"plain"`},
		{`"`, `"\""`},
		{`\`, `"\\"`},
		{"a\nb\r\tc", `"a\nb\r\tc"`},
		{"\x00\x1b\x7f", `"\x00\x1b\x7f"`},
		{"\u2028\u2029\u0085", `"\u2028\u2029\x85"`},
		{"\u202e\ufeff\u200b", `"\u202e\ufeff\u200b"`},
		{"\u00a0", `"\xa0"`},
		{"é😀ключ", `"é😀ключ"`},
		{"\U000e0001", `"\U000e0001"`},
		{"\xff", `"\ufffd"`},
		{"'''", `"'''"`},
	} {
		if got := pyStr(tc.in); got != tc.want {
			t.Errorf("pyStr(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestPyDoc(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", `"""plain"""`},
		{"two\nlines", "\"\"\"two\nlines\"\"\""},
		{`say "hi"`, `"""say "hi\""""`},
		{`"""`, `"""\"\"\""""`},
		{`a""b`, `"""a\""b"""`},
		{"ends with \\", `"""ends with \\"""`},
		{"q\"\nnext", "\"\"\"q\"\nnext\"\"\""},
		{"\"", `"""\""""`},
		{"\r\n", "\"\"\"\\r\n\"\"\""},
	} {
		if got := pyDoc(tc.in); got != tc.want {
			t.Errorf("pyDoc(%q) =\n%s\nwant\n%s", tc.in, got, tc.want)
		}
	}
}

func TestParseJSONKeepsOrder(t *testing.T) {
	v, err := parseJSON([]byte(`{"z": 1, "a": {"y": 2, "b": 3}, "m": [1, "x"], "z": 4}`))
	if err != nil {
		t.Fatal(err)
	}
	o := v.(*object)
	if got := strings.Join(o.keys, ","); got != "z,a,m" {
		t.Errorf("keys = %s, want z,a,m", got)
	}
	if got := strings.Join(o.obj("a").keys, ","); got != "y,b" {
		t.Errorf("nested keys = %s, want y,b", got)
	}
	if n, _ := o.num("z"); n.String() != "4" {
		t.Errorf("repeated key: z = %v, want the last value 4", n)
	}
	for _, bad := range []string{`{`, `{"a": }`, `{} {}`, strings.Repeat("[", maxJSONDepth+2) + strings.Repeat("]", maxJSONDepth+2)} {
		if _, err := parseJSON([]byte(bad)); err == nil {
			t.Errorf("parseJSON(%.20q...) succeeded, want an error", bad)
		}
	}
}
