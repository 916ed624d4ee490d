package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// Build builds an image from the tar build context tarball (a Dockerfile
// at its root), tags it tag, and passes each line the build prints to
// line ("Step 2/9 : RUN ...", the steps' own output). It uses the
// daemon's classic builder (every daemon has it, and it caches a step by
// its text and its parent), removes intermediate containers, and never
// pulls a newer base than the daemon has (a base it lacks is pulled, as
// docker build does). ctx bounds the whole build.
func (c *Client) Build(ctx context.Context, tarball io.Reader, tag string, args map[string]string, line func(string)) error {
	ba, err := json.Marshal(args)
	if err != nil {
		return err
	}
	q := url.Values{"t": {tag}, "buildargs": {string(ba)}, "rm": {"1"}, "forcerm": {"1"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/build?"+q.Encode(), tarball)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("docker daemon at %s: build %s: %w", c.host, tag, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var m struct{ Message string }
		if json.Unmarshal(b, &m) != nil || m.Message == "" {
			m.Message = strings.TrimSpace(string(b))
		}
		return &APIError{Status: resp.StatusCode, Message: m.Message}
	}
	return readBuild(resp.Body, line)
}

// readBuild reads the build's answer, a stream of JSON messages:
// {"stream": text} (lines, possibly split across messages), {"error":
// text} for a failed build, and others (aux, status) that are skipped.
func readBuild(r io.Reader, line func(string)) error {
	dec := json.NewDecoder(r)
	var pending string
	flush := func(all bool) {
		for {
			i := strings.IndexByte(pending, '\n')
			if i < 0 {
				break
			}
			if l := clean(pending[:i]); l != "" {
				line(l)
			}
			pending = pending[i+1:]
		}
		if all && clean(pending) != "" {
			line(clean(pending))
			pending = ""
		}
	}
	for {
		var m struct {
			Stream string `json:"stream"`
			Error  string `json:"error"`
		}
		if err := dec.Decode(&m); err != nil {
			flush(true)
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("docker: build: reading the daemon's answer: %w", err)
		}
		if m.Error != "" {
			flush(true)
			return fmt.Errorf("docker: build failed: %s", strings.TrimSpace(m.Error))
		}
		pending += m.Stream
		flush(false)
	}
}

// ansi matches the terminal escapes the daemon colours a step's stderr
// with.
var ansi = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

// clean is one line of the build's output without its escapes and
// trailing space.
func clean(s string) string {
	return strings.TrimRight(ansi.ReplaceAllString(s, ""), " \t\r")
}

// ImageRemove removes the image tag (the tag only, when other tags share
// the image). An image that is already gone is not an error.
func (c *Client) ImageRemove(ctx context.Context, tag string) error {
	err := c.call(ctx, http.MethodDelete, "/images/"+url.PathEscape(tag), nil, nil, nil)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}
