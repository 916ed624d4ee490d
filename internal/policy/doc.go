// Package policy decides tool calls and shell commands of kernel code by
// rules that a person wrote, or remembered by answering, in a policy file
// on the host; and it keeps the audit log of every decision.
//
//	rules, _ := policy.Parse("approvals.policy", []byte(`
//	allow tool github.search_*
//	deny  tool fs.write_file path=/etc/*
//	allow shell git status
//	`))
//	d := policy.Decide(&policy.Call{Kind: policy.KindShell, Command: "git status; rm -rf ~"}, rules)
//	fmt.Println(d.Action, d.Why())
//	// none no rule matched
//
// # The file
//
// One rule per line; blank lines and lines starting with # are ignored.
// A line is ACTION KIND MATCH, ACTION being allow, ask or deny:
//
//	allow tool SERVER.TOOL                     any arguments; globs on both names
//	allow tool SERVER.TOOL KEY=GLOB KEY=LO..HI conditions on top-level arguments, all must hold
//	allow tool SERVER.TOOL args={...}          exactly these arguments (a remembered answer)
//	allow shell WORD...                        one simple command; a last lone * is any further words
//	redact KEY_GLOB...                         argument names whose values the audit log leaves out
//
// Globs: * (any characters, / included), ?, [a-z], [!a-z], \ to escape. A
// token may be written, whole or in part, as a JSON string in double
// quotes; what is quoted is literal ("a*b" matches a*b only). A GLOB is
// matched against a string argument, or against the JSON text of another
// value (true, 3, null, [1,2]). LO..HI (either may be left out: ..100,
// 10..) matches a number in the range, inclusively, compared exactly as
// decimals. A missing argument fails its condition. args={...} is the last
// token of its line; it matches arguments equal as JSON values (key order
// aside; numbers by their text).
//
// A shell pattern is read with the shell's quoting: 'a b' and "a b" are
// one word, a quoted * is a literal star. See the comment in shell.go for
// which commands an allow rule can match at all.
//
// # Decisions
//
// Deny, then ask, then allow: a call that a deny rule matches is denied,
// else one that an ask rule matches is asked about, else one that an allow
// rule matches is allowed; nothing matched (None) gets the mode's default.
// A deny or ask rule also matches a call it only may match: arguments that
// are not one JSON object without repeated keys, a shell word known only
// when it runs. An allow rule matches only what it can read in full.
//
// A malformed file is an error with its name and line. A file that becomes
// malformed while sessions run makes File.Rules fail until it is fixed:
// callers then ask about every call.
package policy
