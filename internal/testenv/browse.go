package testenv

import (
	"io"
	"net/http"
	"time"
)

// Browse plays the user's browser for an OAuth sign-in: it fetches url in
// the background, following redirects (to the authorization server, then
// to ipybox's redirect listener), after delay. Each fetch is bounded by
// timeout.
func Browse(url string, delay, timeout time.Duration) {
	go func() {
		time.Sleep(delay)
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: timeout}
		if resp, err := c.Get(url); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
}
