package kernel

// ZygoteMarker is in the command line of the fork server and of every
// kernel it forks (a fork keeps its parent's command line).
const ZygoteMarker = "# ipybox zygote"
