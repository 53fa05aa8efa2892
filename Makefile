# One-command entry points. The real interface is `ansible-playbook site.yml` and `ansible-playbook train.yml`;
# these targets only add the controller's virtual environment (.venv) around them.
PYTHON   ?= python3
VENV     := .venv
BIN      := $(VENV)/bin
# The node virtual environment that site.yml makes on the local inventory (inventory/local/group_vars/all.yml).
NODE_PY  ?= /opt/deepspeed-cluster/venv/bin/python
# the slowest tests are listed at the end of each run (where CI time goes)
PYTEST_ARGS ?= --durations=30
# where `make test` keeps pytest's whole output (its failures are printed again at the very end, after the sides
# that ran beside it)
TEST_LOG_DIR ?= outputs/test-logs

.PHONY: setup provision demo lint test test-pytest test-roles test-pytest-roles test-cluster unit unit-fast cluster-test molecule bench

# recipes use bash: `set -o pipefail` keeps a failing side failing through its output's prefixing
SHELL := /bin/bash

$(BIN)/ansible-playbook: requirements.txt
	@echo "== controller tools -> $(VENV) (ansible, ansible-lint, pytest)"
	$(PYTHON) -m venv $(VENV) || { echo "error: '$(PYTHON) -m venv' failed; install your distribution's python3-venv package" >&2; exit 2; }
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt
	@touch $@

setup: $(BIN)/ansible-playbook

# Provision this machine (inventory/local) -- see docs/provisioning.md.
provision: setup
	$(BIN)/ansible-playbook site.yml

# The main job on one machine: provision, then pre-train a tiny BERT with 2 ranks.
demo: provision
	$(BIN)/ansible-playbook train.yml -e model=bert -e model_size=tiny

lint: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-lint
	$(BIN)/ansible-playbook --syntax-check site.yml train.yml

# The fast tier (docs/testing.md): the pytest tests of train/tests and roles/*/tests marked neither torch nor slow
# (pytest.ini; the one way a test is put in a tier: conftest.py refuses a test that runs Ansible unmarked), with the
# controller's .venv -- no provisioning, no torch, no training run, no ansible-playbook. About 25 s of CPU time
# (user + sys 26.0 s, 617 tests, 2026-12-07); the wall time is that plus what the machine's other work takes from
# its 2 cores (42 s at a load average of 4-6, 76 s at 6-9).
unit-fast: setup
	$(BIN)/python -m pytest -m "not torch and not slow" train/tests roles $(PYTEST_ARGS)

# Python tests of train/ and the end-to-end test of the README's main-job command (needs `make provision`).
# torchao: for the float8 tests (the job key float8 is opt-in on real nodes: roles/python_env/defaults/main.yml)
unit:
	$(NODE_PY) -m pip install --quiet --disable-pip-version-check pytest==9.2.0 torchao==0.18.0
	DSC_E2E=$(DSC_E2E) $(NODE_PY) -m pytest train/tests roles $(PYTEST_ARGS)

# Everything CI runs (.ci/run): lint, provision this machine, pytest (unit + end-to-end), the roles' molecule
# scenarios, then the 3-node scenario.
test: setup
	@# lint and provisioning side by side (each prints its output when it ends): ~20 s less than one after the other
	$(MAKE) --no-print-directory --output-sync=target -j2 lint provision
	@# then two sides at once, each line prefixed with its side: pytest and, as soon as it ends, the role
	@# scenarios; beside them the 3-node scenario. pytest keeps about one core busy and the scenario's fault tests
	@# wait on timeouts, so those two fill each other's idle core; the role scenarios (both cores busy) overlap
	@# only the scenario's last minutes. The role scenarios run even when pytest failed, so one run reports all.
	@# pytest's failed tests are named again at the very end (CI keeps the end of the output)
	@rm -f $(TEST_LOG_DIR)/pytest.log
	@rc=0; $(MAKE) --no-print-directory -j2 test-pytest-roles test-cluster || rc=$$?; \
	  if [ $$rc -ne 0 ] && grep -qE '^(FAILED|ERROR) ' $(TEST_LOG_DIR)/pytest.log 2>/dev/null; then \
	    echo "== pytest's failures (its whole output: $(TEST_LOG_DIR)/pytest.log)"; \
	    grep -E '^(FAILED|ERROR) ' $(TEST_LOG_DIR)/pytest.log | sed 's/^/[pytest] /'; fi; exit $$rc

# The sides of `make test` that run side by side (each alone works too).
test-pytest:
	@mkdir -p $(TEST_LOG_DIR)
	set -o pipefail; $(MAKE) --no-print-directory unit DSC_E2E=1 PYTEST_ARGS="$(PYTEST_ARGS) -rfE" 2>&1 \
	  | tee $(TEST_LOG_DIR)/pytest.log | sed -u 's/^/[pytest] /'

test-roles:
	set -o pipefail; $(MAKE) --no-print-directory molecule 2>&1 | sed -u 's/^/[roles] /'

test-pytest-roles:
	rc=0; $(MAKE) --no-print-directory test-pytest || rc=$$?; $(MAKE) --no-print-directory test-roles || rc=$$?; exit $$rc

test-cluster:
	set -o pipefail; $(MAKE) --no-print-directory cluster-test 2>&1 | sed -u 's/^/[cluster] /'

# Multi-node scenario (docs/multi-node.md, "Testing multi-node"): 3 podman containers, site.yml, check.yml, train.yml in both launch
# modes and with a user script, then molecule/cluster/verify.py. Needs root; installs podman, debootstrap and runc with
# apt when missing. 15 min on 2 cores from no image and no wheelhouse, with the DeepSpeed wheel cached by `provision`.
cluster-test: setup
	PATH=$(CURDIR)/$(BIN):$$PATH molecule/cluster/run.sh test

# The roles' molecule scenarios in podman containers (docs/testing.md): cuda preinstalled + support matrix, cuda distro
# (the real CUDA 11.8 from Debian non-free: 1.6 GB download), python_env (air-gapped wheelhouse), nccl (wheel), deepspeed
# (ops from the wheel `provision` cached), node_env. Needs root; installs podman, debootstrap and runc with apt when
# missing and builds the node image. `make molecule SCENARIOS="cuda/distro nccl"` runs some.
molecule: setup
	PATH=$(CURDIR)/$(BIN):$$PATH molecule/roles.sh $(SCENARIOS)

# The GPU benchmark (docs/benchmarks/gpu-<date>.md): ON ONE GPU MACHINE laid out like inventory/h200, with
# the wheelhouse .whl/ of docs/gpu-validation.md: provisions, then trains bert (blog recipe and defaults) and gpt2
# through train.yml and writes $(BENCH_OUT)/gpu-<date>.json and .md.
BENCH_OUT ?= docs/benchmarks
bench:
	molecule/gpu/bench.sh $(BENCH_OUT)
