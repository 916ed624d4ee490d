package ipybox

// checkWritable has no check on Windows: its ACLs are not worth
// predicting; a failure shows at the first write.
func checkWritable(string) error { return nil }
