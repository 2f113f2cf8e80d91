"""Classic DRA (resource.k8s.io/v1alpha2, Kubernetes 1.26-1.31): the legacy mode, in one wing.

Everything only classic DRA needs lives here: the controller loop that answers
PodSchedulingContexts (`controller`, with its `holds`, `params`, `schedulingcontexts`,
`workqueue` and `clusterworkload`), the simulated classic scheduler (`scheduler`), the classic
demo (`demo`) and the classic what-if (`whatif`). Only the
CLI imports this package (an import-linter contract in pyproject.toml), so a v1-only copy of
drasat may delete it and its tests (tests/classic/): scripts/check.py proves that copy installs
and passes its tests. Kubernetes removed classic DRA in 1.32.
"""
