package defaults

import (
	"strings"
	"testing"
	"time"
)

func TestApply(t *testing.T) {
	cases := []struct {
		name    string
		in      time.Duration
		want    time.Duration
		wantErr string
	}{
		{"zero takes the default", 0, time.Minute, ""},
		{"positive is kept", time.Second, time.Second, ""},
		{"negative is an error", -time.Second, -time.Second, `pkg: Options.X is -1s; use a positive duration, or 0 for the default (1m0s)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := c.in
			err := Apply("pkg", Duration{"Options.X", &v, time.Minute})
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("Apply(%v) = %v, want error %q", c.in, err, c.wantErr)
			}
			if v != c.want {
				t.Errorf("Apply(%v) set %v, want %v", c.in, v, c.want)
			}
		})
	}
}
