"""The test bed: what the demo and the tests run drasat against, never part of the product.

- `sim`: the simulated Kubernetes API server (with a v1 scheduler, controller manager and
  kubelet), validated against the official schemas;
- `controlplane`: the runner of the real control plane's binaries (etcd, kube-apiserver, ...);
- `democluster`: the demo's cluster wiring (simulated nodes with node plugins and kubelets);
- `simnvml` and `simmps`: the simulated NVML fleet and the stand-in MPS control daemon.

Nothing in the product (the controller, node plugin, what-if, solver, API types) imports this
package (import-linter's contracts in pyproject.toml); the CLI does for `drasat demo` and for the
node plugin's `--simulate-gpus`. It ships in the wheel; its own dependencies (the official
schemas the simulated API server validates against) come with the `demo` extra:
`pip install '<the drasat wheel>[demo]'` (README.md, Quick start).
"""
