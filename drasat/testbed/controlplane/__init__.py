"""A real Kubernetes control plane on loopback for tests and the demo.

etcd, kube-apiserver, kube-scheduler and kube-controller-manager, built from Go modules by
`scripts/kube-build` into a cache folder (`binaries`), started and stopped as background processes
(`cluster`). Only the standard library is used, so `scripts/kube-cluster` runs without the venv.
"""
