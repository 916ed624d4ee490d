package kernel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
	"github.com/ipybox/ipybox/kernel"
)

func startKernel(t *testing.T, opts *kernel.Options) *kernel.Kernel {
	t.Helper()
	py := testenv.NeedsPython(t)
	var o kernel.Options
	if opts != nil {
		o = *opts
	}
	o.Python = py
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, err := kernel.Start(ctx, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

func TestSmoke(t *testing.T) {
	start := time.Now()
	k := startKernel(t, nil)
	t.Logf("start: %v", time.Since(start))
	ctx := context.Background()
	res, err := k.Execute(ctx, "print('hi')\n2+2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "hi\n4" {
		t.Errorf("text = %q", res.Text)
	}
	_, err = k.Execute(ctx, "1/0", nil)
	var pe *kernel.PythonError
	if !errors.As(err, &pe) || pe.Name != "ZeroDivisionError" {
		t.Fatalf("err = %v", err)
	}
	t.Log(pe.TracebackText())
}
