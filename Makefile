# The two commands of the README:
#   make example   run `gate check` on the bundled incident (examples/incident)
#   make test      lint, type-check and run the whole test suite, e2e against a real control plane,
#                  then the unit tests again at the lowest dependency versions pyproject.toml admits
# Both set up what they need: a virtualenv in .venv with the native YAML reader (native/, built
# with cargo; its build kept in ~/.cache/prune-gate/cargo-target), and the Kubernetes binaries
# (built from Go modules into ~/.cache/prune-gate/bin, once).
# Releasing (.github/workflows/release.yml runs the same):
#   make dist          build and check into dist/ everything a release publishes: sdist and wheel,
#                      the native reader's abi3 wheels (Linux x86_64 and aarch64; narrow with
#                      DIST_NATIVE_TARGETS="x86_64" on a machine that cannot build both), the chart,
#                      the helper binaries (must match action/helper.sha256), SHA256SUMS
#   make helper-pins   rebuild the helper binaries reproducibly and rewrite action/helper.sha256
#   make lock          re-resolve action/requirements.txt, the Action's hashed lock (uv)
# Documentation:
#   make docs          build the site (mkdocs.yml, docs/) into site/ with `mkdocs build --strict`

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: example test lint unit lowest e2e bench binaries native schemas cluster-up cluster-down clean \
	dist helper-pins lock docs

# The checkout is installed editable in compat mode: a static .pth, not setuptools' import hook,
# which costs every `gate` 30-50 ms at start-up that a wheel install never pays (the benchmarks
# run this venv's gate); a setuptools without that transitional mode gets the default one.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,webhook,docs]' --config-settings editable_mode=compat 2>/dev/null \
		|| $(BIN)/python -m pip install --quiet -e '.[dev,webhook,docs]'
	touch $(STAMP)

# The native YAML reader: optional for gate (a warning without cargo), required by `make test`;
# built again only when native/ changes (scripts/build-native keeps its own stamp).
native: $(STAMP)
	scripts/build-native $(BIN)/python

example: native
	@echo '$$ gate check --base-manifests examples/incident/base --head-manifests examples/incident/candidate --context speculative'
	@$(BIN)/gate check --base-manifests examples/incident/base \
		--head-manifests examples/incident/candidate --context speculative; \
		code=$$?; echo; echo "gate exited $$code (0 pass, 1 blocked or deferred, 2 could not decide)"; \
		test $$code -ne 2

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python scripts/check-complexity

# The finding codes in the policy, report and chart schemas, written from the code table
# (gate.model.findings.CODES); tests/unit/test_rule_registry.py fails when they drift.
schemas: $(STAMP)
	$(BIN)/python scripts/gen-schemas

unit: native
	$(BIN)/pytest tests/unit

binaries:
	scripts/build-binaries

e2e: native binaries
	PATH="$(CURDIR)/$(BIN):$(KUSTOMIZE_BIN):$(KUBE_BIN):$$PATH" $(BIN)/pytest tests/e2e

# The pinned kubectl goes first on PATH: kustomize rendering tests use it.
KUBE_BIN = $(shell dirname "$$(scripts/build-binaries path kubectl)")
# gate check --render kustomize runs the confined renderer built from tools/kustomize.
KUSTOMIZE_BIN = $(shell dirname "$$(scripts/build-binaries path prune-gate-kustomize)")

# The unit tests again, against exactly the lowest versions pyproject.toml admits (a virtualenv
# kept in ~/.cache/prune-gate/lowest-versions, rebuilt when a floor changes).
lowest: binaries
	PATH="$(KUSTOMIZE_BIN):$(KUBE_BIN):$$PATH" $(PYTHON) scripts/lowest-versions

test: export PRUNE_GATE_REQUIRE_NATIVE = 1
test: lint native binaries
	PATH="$(CURDIR)/$(BIN):$(KUSTOMIZE_BIN):$(KUBE_BIN):$$PATH" $(BIN)/pytest
	PATH="$(KUSTOMIZE_BIN):$(KUBE_BIN):$$PATH" $(PYTHON) scripts/lowest-versions

bench: native binaries
	$(BIN)/python -m pip install --quiet -e '.[bench]' --config-settings editable_mode=compat
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m bench

# The documentation site, strict: a broken link or anchor fails it (tests/unit/test_docs.py too).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

dist:
	scripts/dist

helper-pins:
	scripts/dist helper-pins

lock:
	scripts/lock

cluster-up:
	scripts/dev-cluster up

cluster-down:
	scripts/dev-cluster down

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache site
