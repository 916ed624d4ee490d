package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/ipybox/ipybox"
)

// policyFlags are the approval policy's flags of exec and mcp.
type policyFlags struct {
	file, log string
}

// noFile turns the policy or the log off.
const noFile = "none"

func (p *policyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.file, "approval-policy", "", "`FILE` of allow, ask and deny rules that decide tool calls and shell commands before anyone is asked, and where answers remembered \"always\" go (default: $XDG_CONFIG_HOME/ipybox/approvals.policy; a sandboxed run creates it when missing, an unsandboxed one when it remembers a rule; \"none\": no rules)")
	fs.StringVar(&p.log, "approval-log", "", "append every approval decision to `FILE` as JSON lines (default: $XDG_CONFIG_HOME/ipybox/approvals.jsonl, created at the first decision of an unsandboxed run, at the start of a sandboxed one; \"none\": no log); read it with `ipybox approvals log`")
}

// load reads the policy and opens the log. Nil, nil when both are off.
func (p *policyFlags) load(log *slog.Logger) (*ipybox.ApprovalPolicy, error) {
	return p.loadWith(log, nil)
}

// loadOnWrite is load for kernels that no sandbox confines: neither file
// is created before something is written to it, and the log's creation
// is told on w, once.
func (p *policyFlags) loadOnWrite(log *slog.Logger, w io.Writer) (*ipybox.ApprovalPolicy, error) {
	return p.loadWith(log, func(path string) {
		fmt.Fprintf(w, "ipybox: recording approval decisions in %s (--approval-log none turns this off)\n", path)
	})
}

// loadWith is load; with created, the files are created on write.
func (p *policyFlags) loadWith(log *slog.Logger, created func(string)) (*ipybox.ApprovalPolicy, error) {
	file, logFile, err := p.paths()
	if err != nil {
		return nil, err
	}
	if file == "" && logFile == "" {
		return nil, nil
	}
	return ipybox.LoadApprovalPolicy(file, &ipybox.ApprovalPolicyOptions{Log: logFile, Logger: log, CreateOnWrite: created != nil, Created: created})
}

// paths returns the policy file and the log as the flags name them, the
// defaults filled in, "" for none.
func (p *policyFlags) paths() (file, log string, err error) {
	switch p.file {
	case noFile:
	case "":
		if file, err = ipybox.DefaultApprovalPolicyFile(); err != nil {
			return "", "", err
		}
	default:
		file = p.file
	}
	switch p.log {
	case noFile:
	case "":
		if log, err = ipybox.DefaultApprovalLogFile(); err != nil {
			return "", "", err
		}
	default:
		log = p.log
	}
	return file, log, nil
}
