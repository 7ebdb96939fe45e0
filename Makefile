# One obvious command per job. The first one you run creates .venv/ by itself.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# make verify SMOKE=1 ONLY="00 03" NPROC=3 DEVICE=cpu SOLUTIONS=1
VERIFY_FLAGS = $(if $(SMOKE),--smoke) $(if $(SOLUTIONS),--solutions=$(SOLUTIONS)) $(if $(NPROC),--nproc $(NPROC)) \
               $(if $(DEVICE),--device $(DEVICE)) $(ONLY)

.PHONY: setup verify test lint lab sync claims screen progress class-plan class-hub class-check bench bench-ddp gpu-check gpu-wheels gpu-rehearsal matrix teardown-abort \
        site reset clean

setup: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml jupyter/overrides.json
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements-dev.txt -e .
	# the notebooks name the kernel "python3": make it this environment's Python
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (ddp-course)"
	# the course's JupyterLab defaults: no "Jupyter news" question, no update check
	# (mkdir and cp: BSD install, on macOS, lacks the GNU -D flag)
	mkdir -p $(VENV)/share/jupyter/lab/settings
	cp jupyter/overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
	touch $(STAMP)

verify: setup  ## execute every notebook headlessly and report
	$(PY) -m coursekit.verify $(VERIFY_FLAGS)

test: setup  ## the test suite (CI: .ci/run runs it, then make verify)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .

bench: setup  ## overhead of the verify command over the runs it launches (see bench-ddp)
	$(PY) benchmarks/verify_overhead.py

# make bench-ddp SMOKE=1 NPROC=4 DEVICE=cuda: notebook 06's DP-vs-DDP benchmark on this machine
bench-ddp: setup  ## DP vs DDP measured here: build/bench/<host>-<date>/report.json + plots
	$(PY) -m coursekit.bench $(if $(SMOKE),--smoke) $(if $(NPROC),--nproc $(NPROC)) \
		$(if $(DEVICE),--device $(DEVICE))

# the first command on a GPU machine: every notebook's GPU tier at SMOKE sizes, AMP/compile/NCCL
# (a GPU machine with no package index: make gpu-wheels here, then there, with its own Python:
#  python3 scripts/gpu_check.py --offline build/gpu-wheels; see docs/instructors.md)
gpu-check: setup  ## build/gpu-check/summary.json
	$(PY) scripts/gpu_check.py $(if $(DEVICE),--device $(DEVICE)) $(if $(ONLY),--only $(ONLY)) \
		$(if $(LANES),--lanes $(LANES)) $(if $(BUDGET),--budget $(BUDGET))

# make gpu-wheels PYVER=3.11: the course's packages that the GPU machine lacks, as wheels
gpu-wheels: setup  ## build/gpu-wheels (Python 3.12 by default), at most 64 MiB
	$(PY) scripts/gpu_wheels.py $(if $(PYVER),--python $(PYVER) --out build/gpu-wheels-py$(subst .,,$(PYVER)))

# the offline GPU check rehearsed on this CPU: the wheels for this Python, a stand-in for the
# GPU machine's Python (scripts/gpu_standin.py: torch 2.11 and only what that machine has)
HERE_PYVER = $(shell $(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
gpu-rehearsal: setup  ## build/gpu-check/summary.json, the --offline check run by the stand-in
	$(MAKE) gpu-wheels PYVER=$(HERE_PYVER)
	$(PY) scripts/gpu_standin.py
	build/gpu-standin/bin/python scripts/gpu_check.py --offline build/gpu-wheels-py$(subst .,,$(HERE_PYVER)) \
		--device cpu $(if $(ONLY),--only $(ONLY)) $(if $(BUDGET),--budget $(BUDGET))

# make matrix TORCH="2.11.0 2.15.0" ONLY="00 02": the course at SMOKE sizes per torch release
matrix: setup  ## side environments in .matrix/ (kept), tables in build/matrix/summary.json
	$(PY) scripts/matrix.py $(if $(TORCH),--torch $(TORCH)) $(if $(ONLY),--only $(ONLY))

# make teardown-abort RUNS=30: gloo's exit abort without the launchers' two lines, per torch
teardown-abort: setup  ## this .venv's torch and every .matrix/ environment's
	$(PY) scripts/teardown_abort.py --runs $(or $(RUNS),30) \
		--python $(abspath $(PY)) $(abspath $(wildcard .matrix/torch-*/bin/python))

site: setup  ## the course as a static website in build/site/, from the last verify run
	test -f build/verify.json || $(PY) -m coursekit.verify $(VERIFY_FLAGS)
	$(PY) -m coursekit.site

# as root (cloud GPU boxes, containers) Jupyter refuses to start without --allow-root: say so
lab: setup
	@if [ "$$(id -u)" = 0 ]; then echo "make lab: running as root, so JupyterLab gets --allow-root"; fi
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $$( [ "$$(id -u)" = 0 ] && echo --allow-root )

sync: setup  ## every launcher from its notebook's %%writefile cell (--check: the differing lines)
	$(PY) scripts/sync_launchers.py $(if $(CHECK),--check)

# make claims CHECK=1: write nothing, print the difference (the tests run the check)
claims: setup  ## docs/claims.md, every claim of the course, from the source (seconds, no kernel)
	$(PY) -m coursekit.claims_doc $(if $(CHECK),--check)

screen: setup  ## what a learner sees: visible lines, bookkeeping share, long cells, launchers off screen
	$(PY) -m coursekit.screen $(ONLY)

progress: setup  ## the course's tasks: solved, not yet, not tried (from build/results)
	$(PY) -c 'import sys, coursekit; sys.exit(coursekit.progress.main())'

# make class-plan SEATS=16 GPUS=8 CORES=64 MEMORY_GIB=512 GPUS_PER_SEAT=1 (hardware: this machine's)
class-plan: setup  ## what each seat of a class server gets (GPUs, cores, memory, tier), or why not
	$(PY) -m coursekit.classplan --seats $(or $(SEATS),$(error give SEATS=N)) $(if $(GPUS),--gpus $(GPUS)) \
		$(if $(CORES),--cores $(CORES)) $(if $(MEMORY_GIB),--memory-gib $(MEMORY_GIB)) \
		$(if $(GPUS_PER_SEAT),--gpus-per-seat $(GPUS_PER_SEAT)) $(if $(GPU_IDS),--gpu-ids $(GPU_IDS))

# as root: sudo CLASS_PASSWORD=... make class-hub SEATS=16 IP=0.0.0.0 PORT=8000 (plan options above)
HUB_PROXY := jupyter/class-hub/node_modules/.bin/configurable-http-proxy
$(HUB_PROXY): jupyter/class-hub/package.json jupyter/class-hub/package-lock.json
	npm ci --no-audit --no-fund --prefix jupyter/class-hub
	touch $@

class-hub: setup $(HUB_PROXY)  ## JupyterHub seating a workshop: a user, a copy, cores and memory per seat
	$(PY) -m coursekit.classhub --seats $(or $(SEATS),$(error give SEATS=N)) $(if $(GPUS),--gpus $(GPUS)) \
		$(if $(CORES),--cores $(CORES)) $(if $(MEMORY_GIB),--memory-gib $(MEMORY_GIB)) \
		$(if $(GPUS_PER_SEAT),--gpus-per-seat $(GPUS_PER_SEAT)) $(if $(GPU_IDS),--gpu-ids $(GPU_IDS)) \
		$(if $(IP),--ip $(IP)) $(if $(PORT),--port $(PORT)) $(if $(SEATS_DIR),--seats-dir $(SEATS_DIR)) \
		$(if $(CULL),--cull-timeout $(CULL)) $(if $(SSL_CERT),--ssl-cert $(SSL_CERT) --ssl-key $(SSL_KEY))

# the night before, while make class-hub runs: notebooks 00 and 03 at SMOKE in every seat at once
class-check: setup  ## build/class-check.json: a row per seat (tier, GPUs, cores, seconds, verdict)
	$(PY) -m coursekit.classcheck $(if $(SEATS_DIR),--state $(SEATS_DIR)/.hub/state.json) $(if $(ONLY),--only $(ONLY))

reset: setup  ## between classes: stop this course's leftover processes, then remove build/
	$(PY) -m coursekit.reset

clean:  ## executed notebooks, results, run directories
	rm -rf build
