//go:build !windows

package trusted_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/trusted"
	"github.com/ipybox/ipybox/internal/trusted/trustedtest"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, dir := range []bool{false, true} {
		for _, v := range trustedtest.Variants(t, dir, true, []byte("x\n")) {
			warn, err := trusted.Check("the thing", v.Path, true)
			var te *trusted.Error
			switch v.Want {
			case trustedtest.Accept:
				if err != nil || warn != "" {
					t.Errorf("dir=%v %s: %q, %v; want it accepted", dir, v.Name, warn, err)
				}
			case trustedtest.Warn:
				if err != nil || !strings.Contains(warn, "chmod go-r") || !strings.Contains(warn, v.Path) {
					t.Errorf("dir=%v %s: %q, %v; want a warning", dir, v.Name, warn, err)
				}
			case trustedtest.Refuse:
				if !errors.As(err, &te) || !strings.Contains(err.Error(), v.Fix) || !strings.Contains(err.Error(), "the thing "+v.Path) {
					t.Errorf("dir=%v %s: %v; want a refusal naming the path and %q", dir, v.Name, err, v.Fix)
				}
			}
		}
	}
}
