// The pod sandbox's first process (the "pause" container) of the test nodes' containerd: what
// Kubernetes' own pause does, in Go, built static by scripts/runtime-build into the pause image.
module drasat.io/e2e/node/pause

go 1.26.0
