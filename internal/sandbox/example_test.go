package sandbox_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/sandbox"
)

func ExampleParseConfig() {
	// An unchanged sandbox-runtime (srt) settings file.
	cfg, err := sandbox.ParseConfig([]byte(`{
	  "network": {"allowedDomains": ["pypi.org", "*.pythonhosted.org"], "allowLocalBinding": false},
	  "filesystem": {"denyRead": ["~/.ssh"], "allowWrite": ["."], "denyWrite": [".env"]}
	}`))
	if err != nil {
		log.Fatal(err)
	}
	// The CLI's --allowed-domain adds to the list.
	if err := cfg.AllowDomains("github.com"); err != nil {
		log.Fatal(err)
	}
	fmt.Println(cfg.RootMode, cfg.Network.AllowedDomains)
	fmt.Println("ignored:", cfg.Ignored)
	// Output:
	// minimal [pypi.org *.pythonhosted.org github.com]
	// ignored: [network.allowLocalBinding]
}

func ExampleNew() {
	sb, err := sandbox.New(sandbox.DefaultConfig(), &sandbox.Options{Workspace: "."})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Close()
	// The kernel runs inside the sandbox: a *Sandbox is a kernel.Launcher.
	k, err := kernel.Start(context.Background(), &kernel.Options{Launcher: sb, Dir: sb.Workspace()})
	if err != nil {
		log.Fatal(err) // a *sandbox.ProbeError says why and how to fix it
	}
	defer k.Close()
}
