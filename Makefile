# `make run` and `make test` set up a fresh machine themselves (a venv in .venv).
# torch is pinned first: the CPU wheel here; a bare `torch` requirement could pull several GB of
# CUDA wheels. On a GPU node, install the torch you want into .venv before `make run`, or set TORCH.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
ARGS ?=
# Air-gapped nodes: `make wheelhouse` where there is an index, copy wheelhouse/ over, then
# `make run WHEELHOUSE=wheelhouse` (installs with no index). PLATFORM (e.g. manylinux_2_28_x86_64) and
# PYVER (e.g. 3.12) download binary wheels for nodes unlike this machine; TORCH="" leaves torch out.
WHEELHOUSE ?=
PLATFORM ?=
PYVER ?=
FROM := $(if $(WHEELHOUSE),--no-index --find-links $(abspath $(WHEELHOUSE)),)
TARGET := $(if $(PLATFORM),--platform $(PLATFORM) --only-binary=:all:,)$(if $(PYVER), --python-version $(PYVER) --only-binary=:all:,)
EXTRAS := accelerate,optimizers,hang
# the tested set (constraints.txt): a fresh machine installs what `make test` last passed on, not whatever was released
# since (accelerate 1.16.0 changed what its sources give, and a fresh clone's CI failed on it); `make canary` meets the
# newest on purpose. CONSTRAINTS= installs the newest of everything.
CONSTRAINTS ?= constraints.txt
PIN := $(if $(CONSTRAINTS),-c $(abspath $(CONSTRAINTS)),)

.PHONY: run compiled test lint bench clean wheelhouse fuzz verify-catalog verify-repro canary first-run

$(BIN)/.installed: setup.cfg pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(if $(WHEELHOUSE),$(BIN)/python -m pip install -q $(FROM) setuptools wheel,$(BIN)/python -m pip install -q --upgrade pip)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q $(FROM) "$(TORCH)"
	$(BIN)/python -m pip install -q $(FROM) $(PIN) $(if $(WHEELHOUSE),--no-build-isolation,) \
		-e ".[deepspeed,$(EXTRAS)$(if $(WHEELHOUSE),,$(comma)dev)]"
	@# DeepSpeed's ops (its Adams, the CPU shared-memory comm) JIT-built once into torch's extensions folder, which the
	@# user's jobs of this environment share (3 min on 2 quiet cores, 10 or more on a loaded box), a line every 30 s;
	@# a node without a compiler builds nothing here, and each run's build phase tries again
	$(BIN)/python -m ds_doctor.ops || echo "DeepSpeed's ops did not build here: each run tries again in its build phase"
	touch $@

comma := ,

# ds-doctor's own wheel, every wheel it and its extras need, and DeepSpeed's sdist (it builds its ops on the
# node) with its own requirements; torch only when TORCH is set (a CUDA build is several GB).
wheelhouse:
	mkdir -p wheelhouse
	$(PYTHON) -m pip wheel -q --no-deps -w wheelhouse .
	$(PYTHON) -m pip download -q -d wheelhouse $(TARGET) $(PIN) setuptools wheel ninja \
		"$$(ls wheelhouse/ds_doctor-*.whl | tail -n 1)[$(EXTRAS)]" $(if $(TORCH),"$(TORCH)",)
	$(PYTHON) -m pip download -q -d wheelhouse $(PIN) --no-deps --no-binary deepspeed "deepspeed>=0.14"
	tar -xzOf "$$(ls wheelhouse/deepspeed-*.tar.gz | tail -n 1)" --wildcards '*/requirements/requirements.txt' \
		| grep -v -E '^(torch|#|$$)' > wheelhouse/deepspeed-requirements.txt
	$(PYTHON) -m pip download -q -d wheelhouse $(TARGET) $(PIN) -r wheelhouse/deepspeed-requirements.txt
	@echo "wheelhouse/: $$(ls wheelhouse | wc -l) files; install on the node with: make run WHEELHOUSE=wheelhouse"

# Every process of a run (the doctor, torchrun's agents, each rank) imports ds-doctor's modules from this editable
# install; with no bytecode beside them (where PYTHONDONTWRITEBYTECODE is set, as on this machine) each compiled them
# again. Compiled once here (a second; nothing when they are up to date): a one-case run at two ranks took 6.1 CPU-s
# instead of 7.2 (four runs each way, alternated)
COMPILED := doctor probes reports tests
compiled: $(BIN)/.installed
	@$(BIN)/python -m compileall -q -j 0 $(COMPILED) >/dev/null

run: compiled
	$(BIN)/ds-doctor run $(ARGS)

# Two pytest sessions at once, each about half the suite's time: the multi-rank tests leave a core idle while ranks
# wait on each other, on hung ranks and on killed nodes. Beside them from the start, the tests marked `loaded` (a real
# hang cut short with its evidence, launches taking turns, an op build killed at any moment) and one spinning process
# per two cores until those end, at the lowest priority (nice 19): it takes a core whenever the sessions leave one
# idle (a wait, a hang being cut short), so the loaded tests never meet an idle box, and next to nothing while the
# sessions are busy. At the default priority it took a core from the sessions for the loaded tests' 2.3 min, and
# `make test` took 11:56 of its 12 minutes. Run after the sessions beside two spinning processes per core (2.45
# times), the loaded tests took 1.7-2 min more (12:18). The second session's output and the loaded tests' follow the
# first's. Any of the three failing fails. The first session's files (the rest are the second's) were chosen so that
# both end together: on 2026-12-02 the first ended 40 s before the second, and test_multinode.py moved over.
TESTS_A := tests/test_e2e.py tests/probes tests/releases tests/ops tests/cluster/test_slurm.py tests/test_readme.py \
	tests/test_multinode.py
# the files holding the tests marked `loaded` (collecting the whole tree to deselect all but these took 9-15 s beside
# the hog); tests/test_layout.py fails on a `loaded` test in a file not listed here
LOADED := tests/forensics/test_hang.py tests/run/test_turns.py tests/ops/test_phase.py
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider
test: $(BIN)/.installed lint $(BIN)/.sysdeps compiled
	@log=$$(mktemp); loaded=$$(mktemp); hogs=$$(( ($$(nproc) + 1) / 2 )); pids=""; \
	for i in $$(seq $$hogs); do timeout 1800 nice -n 19 sh -c 'while :; do :; done' & pids="$$pids $$!"; done; \
	( $(PYTEST) -m loaded $(LOADED) > $$loaded 2>&1; c=$$?; kill $$pids 2>/dev/null; exit $$c ) & hogged=$$!; \
	$(PYTEST) -m "not loaded" $(addprefix --ignore=,$(TESTS_A)) > $$log 2>&1 & other=$$!; \
	$(PYTEST) -m "not loaded" $(TESTS_A); a=$$?; wait $$other; b=$$?; wait $$hogged; c=$$?; \
	kill $$pids 2>/dev/null; wait $$pids 2>/dev/null; \
	echo "--- the rest of the suite (run beside it):"; cat $$log; rm -f $$log; \
	echo "--- the tests marked loaded (beside both, and $$hogs processes at nice 19 that spun a core each until they ended):"; \
	cat $$loaded; rm -f $$loaded; \
	[ $$a -eq 0 ] && [ $$b -eq 0 ] && [ $$c -eq 0 ]

# What the infrastructure tests start for real: Debian's slurm-wlm and munge (a two-node Slurm cluster in network
# namespaces, tests/cluster/) and prometheus' promtool (the alert rules in contrib/). Installed where this is root on
# Debian with apt; elsewhere those tests skip and say why.
SYSDEPS := slurm-wlm munge prometheus chromium
$(BIN)/.sysdeps: $(BIN)/.installed
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		command -v slurmctld >/dev/null && command -v munged >/dev/null && command -v promtool >/dev/null && \
		command -v chromium >/dev/null || \
		{ DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(SYSDEPS) >/dev/null 2>&1 || \
		  { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		    --no-install-recommends $(SYSDEPS) >/dev/null 2>&1; } || echo "apt could not install $(SYSDEPS): their tests skip"; }; \
	else echo "not root with apt: the Slurm and promtool tests skip"; fi
	touch $@

# a first run as a new user meets it on a busy node: level 2 in a fresh HOME (its ops built from nothing) beside a CPU
# hog of twice the cores; fails on a timeout or a silence over 30 s (minutes: never part of `make test`)
first-run: $(BIN)/.installed
	$(BIN)/python bench/bench_first_run.py

# the CLI fuzz on a long budget (CI runs it derandomized at 40 examples a test, inside `make test`)
fuzz: $(BIN)/.installed
	DS_DOCTOR_FUZZ_EXAMPLES=2000 $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_fuzz_cli.py

# the known-issue catalog measured: each planned entry's case on overlays of the releases at both ends of its range
# (downloads and builds releases: never part of `make test`, which checks the records it writes against the ranges)
verify-catalog: $(BIN)/.installed
	$(BIN)/python -m ds_doctor.releases.verify
	$(BIN)/python -m ds_doctor.releases.verify --ends

# every catalog entry's reproduction (tests/resources/repro/) run again, its output triaged (minutes)
verify-repro: $(BIN)/.installed
	$(BIN)/python tests/resources/repro/run_all.py

# what upstream just broke or fixed: level 3 on the stack as installed and on an overlay of the newest deepspeed,
# accelerate and transformers (those newer than installed), side by side in one report (downloads: not in make test)
canary: $(BIN)/.installed
	$(BIN)/ds-doctor run --level 3 --out ds-doctor-reports/canary \
		$$($(BIN)/python -m ds_doctor.releases.verify --newest deepspeed accelerate transformers)

# The formatter, the linter (complexity and argument counts included) and the type checker. mypy reads the one
# import name: build/typecheck/ds_doctor links the folders as setup.cfg's package_dir maps them.
LINTED := doctor probes reports tests bench
lint: $(BIN)/.installed
	$(BIN)/ruff format --check -q $(LINTED)
	$(BIN)/ruff check -q $(LINTED)
	@rm -rf build/typecheck && mkdir -p build/typecheck/ds_doctor && ln -s $(CURDIR)/doctor/* build/typecheck/ds_doctor/ \
		&& ln -s $(CURDIR)/probes $(CURDIR)/reports build/typecheck/ds_doctor/
	cd build/typecheck && $(abspath $(BIN))/mypy --config-file $(CURDIR)/pyproject.toml \
		--cache-dir $(CURDIR)/build/mypy-cache -p ds_doctor

bench: $(BIN)/.installed
	$(BIN)/python bench/bench_env.py
	$(BIN)/python bench/bench_nightly.py
	$(BIN)/python bench/bench_recorder.py
	$(BIN)/python bench/bench_collect.py
	$(BIN)/python bench/bench_equivalence.py
	$(BIN)/python bench/bench_matrix.py
	$(BIN)/python bench/bench_false_alarms.py
	$(BIN)/python bench/bench_digest.py
	$(BIN)/python bench/bench_level2.py
	$(BIN)/python bench/bench_triage_heldout.py
	$(BIN)/python bench/bench_fleet.py
	$(BIN)/python bench/bench_watch.py

clean:
	rm -rf $(VENV) ds-doctor-reports wheelhouse
