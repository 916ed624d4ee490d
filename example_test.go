package ipybox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/mcpserver"
)

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ipybox-example")
	defer os.RemoveAll(dir)

	ex, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.Close()

	ex.Execute(ctx, "x = 6 * 7", nil) // state persists across cells
	res, err := ex.Execute(ctx, "print(x)", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Text)
	// Output: 42
}

func ExampleExecutor_Stream() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ipybox-example")
	defer os.RemoveAll(dir)
	ex, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.Close()

	code := "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.1)"
	for ev, err := range ex.Stream(ctx, code, nil) {
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		switch ev := ev.(type) {
		case *ipybox.Output:
			fmt.Printf("%s: %q\n", ev.Stream, ev.Text)
		case *ipybox.Result:
			fmt.Printf("done: %q\n", ev.Text)
		}
	}
	// Output:
	// stdout: "0\n"
	// stdout: "1\n"
	// stdout: "2\n"
	// done: "0\n1\n2"
}

func ExampleExecutor_Execute_error() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ipybox-example")
	defer os.RemoveAll(dir)
	ex, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.Close()

	res, err := ex.Execute(ctx, "print('working')\n1 / 0", nil)
	var pe *ipybox.PythonError
	if errors.As(err, &pe) {
		fmt.Println(res.Text)
		fmt.Println(pe.Name, "-", pe.Value)
	}
	// Output:
	// working
	// ZeroDivisionError - division by zero
}

func ExampleExecutor_RegisterMCPServer() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ipybox-example")
	defer os.RemoveAll(dir)
	ex, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.Close()

	// The reference server, as scripts/setup.sh installs it.
	everything, _ := filepath.Abs("tools/npm/node_modules/.bin/mcp-server-everything")
	if _, err := ex.RegisterMCPServer(ctx, "everything", ipybox.ServerConfig{
		Command: everything, Args: []string{"stdio"},
	}); err != nil {
		fmt.Println(err)
		return
	}
	code := "from mcptools.everything.echo import Params, run\nprint(run(Params(message='hi')))"
	for ev, err := range ex.Stream(ctx, code, nil) {
		if err != nil {
			fmt.Println(err)
			return
		}
		switch ev := ev.(type) {
		case *ipybox.ApprovalRequest:
			// Args is the JSON kernel code sent: decode what you decide on.
			var args struct{ Message string }
			json.Unmarshal(ev.Args, &args)
			fmt.Println("approve?", ev.Server, ev.Tool, args.Message)
			ev.Accept()
		case *ipybox.Result:
			fmt.Println(ev.Text)
		}
	}
	// Output:
	// approve? everything echo hi
	// Echo: hi
}

func ExamplePool() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ipybox-example")
	defer os.RemoveAll(dir)

	pool := ipybox.NewPool(1, &ipybox.Options{WorkDir: dir})
	defer pool.Close()

	// Each Get hands out a kernel of its own; a warm one when ready.
	for i := range 2 {
		ex, err := pool.Get(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		res, _ := ex.Execute(ctx, fmt.Sprintf("%d * 10", i+1), nil)
		fmt.Println(res.Text)
		ex.Close()
	}
	// Output:
	// 10
	// 20
}

// ExampleContainerConfig runs the kernel in a Docker container from the
// image scripts/image.sh builds; the workspace is at /app/workspace there.
// (Not run as a test: it needs Docker; container_test.go covers it.)
func ExampleContainerConfig() {
	ctx := context.Background()
	ex, err := ipybox.Start(ctx, &ipybox.Options{
		WorkDir: "/home/me/agent-work",
		Container: &ipybox.ContainerConfig{
			Image:          ipybox.DefaultContainerImage,
			Env:            map[string]string{"DEBUG": "true"},
			Binds:          []ipybox.ContainerBind{{HostPath: "/home/me/datasets", Path: "datasets"}}, // at /app/datasets
			AllowedDomains: []string{"pypi.org", "*.pythonhosted.org"},                                // nothing else
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.Close()
	res, err := ex.Execute(ctx, "import os\nprint(os.getcwd(), os.listdir('/app/datasets'))", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Text)
}

// A session whose kernel runs on a Jupyter Server, Kernel Gateway or
// Enterprise Gateway. The token comes from the environment (or a file),
// never from the command line. There is no Output: it needs a server.
func ExampleGatewayConfig() {
	ctx := context.Background()
	ex, err := ipybox.Start(ctx, &ipybox.Options{
		Gateway: &ipybox.GatewayConfig{
			URL:   os.Getenv("JUPYTER_GATEWAY_URL"),
			Token: os.Getenv("JUPYTER_GATEWAY_AUTH_TOKEN"),
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.Close() // deletes the remote kernel
	res, err := ex.Execute(ctx, "import socket; print(socket.gethostname())", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("ran on", res.Text)
}

// UploadFile and DownloadFile move files between the host and the kernel's
// working directory over the kernel's channel: they work the same for a
// local, sandboxed, container or gateway kernel.
func ExampleExecutor_UploadFile() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ipybox-example")
	defer os.RemoveAll(dir)
	ex, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.Close()

	if _, err := ex.UploadFile(ctx, "data/in.csv", strings.NewReader("a,b\n1,2\n")); err != nil {
		fmt.Println(err)
		return
	}
	ex.Execute(ctx, "import csv\nrows = list(csv.reader(open('data/in.csv')))\nopen('out.txt', 'w').write(f'{len(rows)} rows')", nil)
	var out strings.Builder
	if _, err := ex.DownloadFile(ctx, "out.txt", &out); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out.String())
	// Output: 2 rows
}

// A program keeps a session's handle and comes back to its kernel, with its
// variables, through a new connection: here to a server in this process,
// usually to `ipybox mcp --http`, with a token (RemoteOptions.Token).
func ExampleDial() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ipybox-example")
	defer os.RemoveAll(dir)
	srv, err := mcpserver.New(&mcpserver.Options{Workspace: dir, HTTP: mcpserver.HTTPOptions{NoAuth: true}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	url := hs.URL + "/mcp"

	r, err := ipybox.Dial(ctx, url, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := r.CreateSession(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Execute(ctx, "total = 40", nil)
	handle := s.Handle() // keep it: the kernel outlives the connection
	r.Close()

	r, err = ipybox.Dial(ctx, url, nil) // later, from a new connection
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	s = r.Session(handle)
	res, err := s.Execute(ctx, "print(total + 2)", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Text)
	s.Close(ctx) // ends the session: its kernel stops
	// Output: 42
}
