package kernel

import "os"

// platformEnv is what Python needs on Windows besides the constructed
// environment: without SYSTEMROOT it cannot even seed its hash, and
// without the profile and temp directories site and pip go astray.
func platformEnv() []string {
	var env []string
	for _, k := range []string{"SYSTEMROOT", "WINDIR", "COMSPEC", "PATHEXT", "TEMP", "TMP",
		"USERPROFILE", "APPDATA", "LOCALAPPDATA", "PROGRAMDATA"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// confineEnv: the ipybox image is Linux's.
func confineEnv() []string { return nil }
