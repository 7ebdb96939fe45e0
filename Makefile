# One obvious command per job. The first one you run creates .venv/ by itself.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# make verify SMOKE=1 ONLY="00 03" NPROC=3 DEVICE=cpu SOLUTIONS=1
VERIFY_FLAGS = $(if $(SMOKE),--smoke) $(if $(SOLUTIONS),--solutions) $(if $(NPROC),--nproc $(NPROC)) \
               $(if $(DEVICE),--device $(DEVICE)) $(ONLY)

.PHONY: setup verify test lint lab progress bench bench-ddp gpu-check site reset clean

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
gpu-check: setup  ## build/gpu-check/summary.json
	$(PY) scripts/gpu_check.py $(if $(DEVICE),--device $(DEVICE)) $(if $(ONLY),--only $(ONLY))

site: setup  ## the course as a static website in build/site/, from the last verify run
	test -f build/verify.json || $(PY) -m coursekit.verify $(VERIFY_FLAGS)
	$(PY) -m coursekit.site

# as root (cloud GPU boxes, containers) Jupyter refuses to start without --allow-root: say so
lab: setup
	@if [ "$$(id -u)" = 0 ]; then echo "make lab: running as root, so JupyterLab gets --allow-root"; fi
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $$( [ "$$(id -u)" = 0 ] && echo --allow-root )

progress: setup  ## the course's tasks: solved, not yet, not tried (from build/results)
	$(PY) -m coursekit.progress

reset: setup  ## between classes: stop this course's leftover processes, then remove build/
	$(PY) -m coursekit.reset

clean:  ## executed notebooks, results, run directories
	rm -rf build
