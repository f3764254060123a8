# gpucluster development tasks. `make install` then `make test` on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install test lint typecheck unit all-tests bench run try-chart crds cel-parser wheel clean kube kube-if-go oracle fuzz-dra \
	wheels image image-push image-if-possible

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "gpucluster needs Python >= 3.11 (found $$($(PYTHON) --version))" >&2; exit 2; }
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { \
		echo "python3 -m venv failed; installing python3-venv" >&2; \
		rm -rf $(VENV); \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null; \
		else echo "install your distribution's python3-venv package and retry" >&2; exit 2; fi; \
		$(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck:
	$(BIN)/python -m tools.typecheck

# The unit tier: plain data and in-process servers, no end-to-end tier and nothing marked
# integration (tests that start the sandbox's processes, the real control plane, the webhook
# process or build the wheel). Under 3 minutes on 2 cores.
unit:
	$(BIN)/pytest -m "not integration" --ignore=tests/e2e --ignore=tests/realkube --ignore=tests/image --ignore=tests/oracle

# Every tier: unit, integration and end to end.
all-tests:
	$(BIN)/pytest

# The real-control-plane tier needs the binaries: built first when Go is here (a no-op once cached).
# The chart's end-to-end tests run the operator image: built first where buildah is or can be installed.
test: lint typecheck kube-if-go image-if-possible all-tests

kube-if-go:
	@if command -v go >/dev/null 2>&1; then $(MAKE) --no-print-directory kube oracle; \
	else echo "make test: Go not found: the real-control-plane tier skips (CI=true fails it); install Go >= 1.24"; fi

# The operator image, with buildah (installed from Debian's packages when missing and we are root),
# on a Debian base made by mmdebstrap: dist/gpucluster-image.tar, tagged as the chart's default
# image. A no-op when the sources have not changed. See README, "The operator image".
image: install
	@$(BIN)/python -m tools.image build

# The wheels the Dockerfile installs (for `docker build .`): dist/wheels.
wheels: install
	@$(BIN)/python -m tools.image wheels

# Push the built image: make image-push REGISTRY=registry.example.com:5000/gpucluster
image-push: image
	@test -n "$(REGISTRY)" || { echo "make image-push REGISTRY=host[:port][/path]" >&2; exit 2; }
	@$(BIN)/python -m tools.image push $(REGISTRY)

# Outside CI a failed image build leaves the venv as the fallback (the tests say so); CI=true fails.
image-if-possible:
	@if [ "$$(id -u)" = 0 ] || command -v buildah >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory image || { [ "$$CI" != true ] && \
		echo "make test: make image failed: the chart's pods run from the venv (CI=true fails that)"; }; \
	else echo "make test: buildah not found and not root: the chart's pods run from the venv (CI=true fails that); install buildah and mmdebstrap"; fi

bench:
	$(BIN)/python -m bench $(SUITES)

run:
	$(BIN)/gpucluster run

# Install the chart with real Helm into a fresh sandbox (operator pods as processes, RBAC enforced)
# and keep it running: RECIPE=pre-installed|operator-managed.
RECIPE ?= pre-installed
try-chart:
	$(BIN)/python -m tools.try_chart --recipe $(RECIPE) --kubeconfig-out sandbox.kubeconfig

# Build Kubernetes' own control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler) from Go modules into ~/.cache/gpucluster/kube/<version>/: KUBE_VERSIONS=1.34 1.37.
KUBE_VERSIONS ?= 1.34 1.37
kube:
	@for v in $(KUBE_VERSIONS); do $(BIN)/gpucluster cluster build --version $$v || exit $$?; done

# Build the DRA oracle (tests/oracle: Kubernetes' own allocator and CEL environment, one binary
# per version) into ~/.cache/gpucluster/oracle/<minor>/: ORACLE_VERSIONS=1.34 1.35 1.36 1.37.
ORACLE_VERSIONS ?= 1.34 1.35 1.36 1.37
oracle:
	@$(BIN)/python -m tests.oracle.build $(ORACLE_VERSIONS)

# More differential cases than CI runs, ours against upstream's allocator: N per version.
N ?= 20000
fuzz-dra: oracle
	GPUCLUSTER_ORACLE_CASES=$(N) $(BIN)/pytest -q -p no:cacheprovider tests/oracle

# Regenerate the CRD manifests from the API models (a test fails when they are stale).
crds:
	$(BIN)/python -m gpucluster.api.crd charts/gpucluster/crds

# Rebuild the shipped CEL parser after editing cel.lark (a test fails when it is stale).
cel-parser:
	$(BIN)/python -c 'from gpucluster.dra.cel.parser import write_built_parser; write_built_parser()'

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .pytest_cache .ruff_cache bench/results.json
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
