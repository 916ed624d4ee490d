package testenv

import (
	"bufio"
	"io"
	"net/http"
	"regexp"
)

// Bearer is an http.RoundTripper that adds "Authorization: Bearer Token"
// to every request and sends it with Base (nil: http.DefaultTransport).
type Bearer struct {
	Token string
	Base  http.RoundTripper
}

func (b Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.Token)
	base := b.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

var servingRE = regexp.MustCompile(`serving streamable HTTP at (http://\S+/mcp)`)

// ServingURL reads the stderr of `ipybox mcp --http` and sends on the
// channel it returns the URL the server says it serves, then drains r to
// its end (so that the server never blocks on a full pipe). The channel is
// never closed: select on it beside the process's exit and a timeout.
func ServingURL(r io.Reader) <-chan string {
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				urlc <- m[1]
				break
			}
		}
		io.Copy(io.Discard, r)
	}()
	return urlc
}
