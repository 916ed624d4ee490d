package mcpserver

import "testing"

func TestPlainValidation(t *testing.T) {
	t.Parallel()
	const p = `validating "arguments": validating root: `
	tests := []struct{ in, want string }{
		{p + `validating /properties/timeout: type: abc has type "string", want "number"`,
			`invalid arguments for t: argument timeout must be a number, not string (abc)`},
		{p + `validating /properties/code: type: <invalid reflect.Value> has type "null", want "string"`,
			`invalid arguments for t: argument code must be a string, not null`},
		{p + `required: missing properties: ["code"]`,
			`invalid arguments for t: missing required argument code`},
		{p + `validating /properties/timeout: exclusiveMinimum: -5/1 is less than or equal to 0.000000`,
			`invalid arguments for t: argument timeout must be greater than 0 (got -5)`},
		{p + `validating /properties/n: minimum: 1/2 is less than 1.000000`,
			`invalid arguments for t: argument n must be at least 1 (got 0.5)`},
		{p + `unexpected additional properties ["source" "x"]`,
			`invalid arguments for t: unknown argument source, x (see the tool's input schema for the arguments it takes)`},
		{p + `validating /properties/server_params: validating /properties/server_params/properties/command: type: 5 has type "integer", want "string"`,
			`invalid arguments for t: argument server_params.command must be a string, not integer (5)`},
		{p + `validating /properties/server_params: required: missing properties: ["command"]`,
			`invalid arguments for t: missing required argument server_params.command`},
		{p + `validating /properties/a: type: 1 has type "integer", want one of ["string" "array"]`,
			`invalid arguments for t: argument a must be a string or array, not integer (1)`},
		{p + `validating /properties/s: pattern: "x" does not match regular expression "^a"`,
			`invalid arguments for t: argument s: pattern: "x" does not match regular expression "^a"`},
	}
	for _, tc := range tests {
		got, ok := plainValidation("t", tc.in)
		if !ok || got != tc.want {
			t.Errorf("%s\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
	if _, ok := plainValidation("t", "NameError: x"); ok {
		t.Error("a cell's own error was rewritten")
	}
}
