package ipybox

// rewindState is an Executor's kept cell boundaries (see Rewind).
type rewindState struct{}
