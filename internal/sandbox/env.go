package sandbox

import "strings"

// envValue returns the value of key in env ("KEY=VALUE"), the last wins.
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}
