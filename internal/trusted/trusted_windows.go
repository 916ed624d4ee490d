package trusted

// Check accepts every path on Windows, which has no owner and mode bits
// of this kind (its ACLs are left to the user).
func Check(what, path string, secret bool) (warning string, err error) { return "", nil }
