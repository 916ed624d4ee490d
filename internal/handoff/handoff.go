// Package handoff moves what an ipybox.Executor holds for its session to
// the Executor that replaces it in the same session, for mcpserver, without
// a public method: a reset that swaps in a kernel the warm pool started in
// advance keeps the session's name in the audit log and spans, and the
// answers its person gave "for this session".
package handoff

// Session moves from's session name and the answers remembered for its
// session to to, an Executor that no caller has used yet. Both are
// *ipybox.Executor; package ipybox sets it at init.
var Session func(from, to any)
