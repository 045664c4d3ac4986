# kvsim: the two commands are `make lab` and `make test`. `make help` lists the rest.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Python writes no bytecode where PYTHONDONTWRITEBYTECODE is set (this machine and its CI set it): every process
# would then compile every module it imports from source, every time. Measured in a fresh .venv: a lesson kernel's
# imports 3.4 CPU-s without bytecode, 1.5 with; mlx-lm + torch 9.0 and 5.0. The recipes run without the variable:
# the first import of a module writes its bytecode (into .venv, ours, and git-ignored __pycache__/ folders) and every
# later process reads it.
unexport PYTHONDONTWRITEBYTECODE

PYTHON ?= python3
VENV ?= .venv
HOST ?= 127.0.0.1
PORT ?= 8888

PY := $(VENV)/bin/python
# One stamp per set of extras: re-install only when pyproject.toml changed (or the venv was recreated).
LAB_STAMP := $(VENV)/.kvsim-lab.stamp
TEST_STAMP := $(VENV)/.kvsim-test.stamp
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
# JupyterLab settings for this venv (tools/lab_overrides.json): no "get notified about Jupyter news?" pop-up and no
# update check. The browser test serves the same file and checks that no news notification appears.
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.json

# The exact pytest arguments of each stage. tests/test_notebooks.py reads NBVAL_ARGS and UI_ARGS from this file
# to prove that every notebook (lessons and notebooks/solutions/) is collected by the nbval run and every lesson by
# the browser run.
# Every pytest process pays for the plugins it loads (nbval's nbformat import alone is ~3 CPU-s) and the test
# modules it collects (mlx-lm, transformers, hypothesis: ~25 CPU-s for all of tests/): a stage loads only the
# plugins it uses, and the engines and env stages collect only the files that hold their marks
# (tests/test_stages.py checks that no `engines` or `slow` mark lives anywhere else). The engine files mark every
# test `engines` (a module pytestmark), so the unit stage ignores them, and the notebooks' structure tests run in
# the nbval stage: the unit stage's workers then never import mlx-lm, transformers and torch (~5 CPU-s each) nor
# nbformat's jsonschema (~3 CPU-s each).
NOT_NB := -p no:nbval -p no:playwright
ENGINES_FILES := tests/test_engines_transformers.py tests/test_engines_mlx_lm.py tests/test_mlx_lm_dropin.py \
  tests/test_hostile_measure.py tests/test_bench_roofline.py
# The notebooks' structure (tests/test_notebooks.py reads every notebook with nbformat) runs in the nbval stage,
# whose processes import nbformat anyway.
NB_TEST_FILES := tests/test_notebooks.py
ENV_FILES := tests/test_environment.py tests/test_extras.py tests/test_engines_vllm.py
UNIT_ARGS := tests -m "not ui and not slow and not engines" -n auto --maxprocesses 8 --ignore=tests/ui \
  $(addprefix --ignore=,$(ENGINES_FILES) $(NB_TEST_FILES)) $(NOT_NB)
ENGINES_ARGS := $(ENGINES_FILES) -m "engines and not ui" -n auto --maxprocesses 8 $(NOT_NB)
ENV_ARGS := $(ENV_FILES) -m "slow and not ui" $(NOT_NB)
NBVAL_ARGS := -n auto --maxprocesses 8 --dist loadfile --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=300 notebooks/ $(NB_TEST_FILES)
# The browser stage spends most of its time waiting on JupyterLab and the kernel: two workers, two labs.
UI_ARGS := tests/ui -m ui -n 2 -p no:nbval
# The views on the oldest matplotlib kvsim supports (pyproject: matplotlib>=3.8): that release goes into its own
# folder, put first on PYTHONPATH over the venv (--no-deps: numpy, pillow and the rest stay the venv's).
MPL_OLDEST := 3.8.*
MPL_OLDEST_DIR := .venv-mpl-oldest
VIEW_TESTS := tests/test_widgets.py $(sort $(wildcard tests/lessons/test_l*.py))
# What depends on matplotlib's version: drawing and layout (every view with every control at its extremes, through
# the no-crop test), the renderer against stock Agg, the lessons' tests that draw (KVSIM_DRAWING_TESTS_ONLY=1:
# tests/lessons/conftest.py leaves out their pure-data and MLX tests). The version-blind mechanics (control
# defaults, static page, the notebook cell) ran in the unit stage; skipping them here keeps
# this stage short. (3.8's mathtext calls pyparsing's old camelCase names: pyparsing 3.2 warns, harmlessly.)
MPL_OLDEST_ARGS := $(VIEW_TESTS) -m "not ui and not slow and not engines" -n auto --maxprocesses 8 $(NOT_NB) -W ignore::DeprecationWarning \
  -k "not (static_page or real_notebook)"

.PHONY: help lab test install install-lab env-mpl-oldest env-prebuild test-unit test-mpl-oldest test-engines test-env test-notebooks test-ui browser notebooks bench clean

help:
	@echo "make lab            create .venv, install kvsim[lessons], launch JupyterLab on notebooks/ ($(HOST):$(PORT))"
	@echo "make test           create/update .venv and run every test: unit, notebooks (nbval), real browser"
	@echo "make test-unit | test-mpl-oldest | test-engines | test-env | test-notebooks | test-ui   one stage of make test"
	@echo "make notebooks      re-execute every notebook (lessons and solutions/) in place and sync the jupytext pairs"
	@echo "make bench          run the benchmark scripts in benchmarks/"
	@echo "variables: PYTHON=$(PYTHON) VENV=$(VENV) HOST=$(HOST) PORT=$(PORT); KVSIM_REQUIRE_BROWSER=1 fails when chromium is missing"

$(PY):
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "kvsim needs Python >= 3.10, $(PYTHON) is " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)

$(LAB_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[lessons]'
	@touch $@

# --no-compile: no bytecode for the thousands of modules never imported (torch, transformers, JupyterLab's server
# extensions); those that are get compiled on first import (and written: see PYTHONDONTWRITEBYTECODE above).
$(TEST_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --no-compile -e '.[lessons,test,ui]'
	@touch $@ $(LAB_STAMP)

install-lab: $(LAB_STAMP)
install: $(TEST_STAMP)

$(LAB_OVERRIDES): tools/lab_overrides.json | $(PY)
	mkdir -p $(dir $@)
	cp tools/lab_overrides.json $@

lab: $(LAB_STAMP) $(LAB_OVERRIDES)
	$(VENV)/bin/jupyter lab notebooks/ --ip $(HOST) --port $(PORT) $(ROOT_FLAG)

# Every stage runs even if an earlier one failed; the summary names the failed stages and the exit status is 1.
# pip installs on one core. So while it fills .venv, a background job (system Python only: a tiny venv with
# PyYAML for tools/check_env.py) fetches the oldest matplotlib and builds the env stage's fresh venvs
# (environment.yml's pip block, and kvsim alone) under $(ENV_PREBUILT); the env stage's tests then check those
# venvs (KVSIM_ENV_PREBUILT; run alone, `make test-env` builds its own).
# Then the browser stage starts at once, at normal priority, and the other stages run one after another beside
# it under `nice -n 19`. The browser stage waits on JupyterLab, kernels and Chromium: it keeps about one of the
# 2 cores busy (measured: 159-186 CPU-s in 172-195 s), and a job beside it at the same priority slows every one
# of its waits (measured: the env stage beside it at priority 0 saved 3 s of 73). At nice 19 the batch stages
# take only the cycles it leaves idle (CFS weights 15 against 1024), and all of the machine once it is done.
# Its log: $(UI_LOG), printed at the end.
# The summary gives each stage's wall time and CPU-s (bash's `times` in a subshell around each stage).
# Logs: $(ENV_LOG) (the background build), $(UI_LOG) (the browser stage).
ENV_LOG := test-artifacts/env-prebuild.log
UI_LOG := test-artifacts/browser-stage.log
ENV_PREBUILT := .venv-env-checks
ENV_TOOLS := $(ENV_PREBUILT)/tools
KVSIM_ENV_PREBUILT ?=
test:
	@mkdir -p test-artifacts; rm -f $(ENV_LOG)* $(UI_LOG)*; failed=""; t0=$$(date +%s); \
	seconds() { tail -1 $$1 | tr 'ms' '  ' | awk '{printf "%d", $$1 * 60 + $$2 + $$3 * 60 + $$4}'; }; \
	cpu() { times > test-artifacts/make-test.times; CPU=$$(seconds test-artifacts/make-test.times); }; \
	( nice -n 19 $(MAKE) --no-print-directory env-mpl-oldest > $(ENV_LOG).mpl 2>&1; echo $$? > $(ENV_LOG).mplrc; \
	  nice -n 19 $(MAKE) --no-print-directory env-prebuild > $(ENV_LOG) 2>&1; echo $$? > $(ENV_LOG).rc; \
	  echo $$(( $$(date +%s) - t0 )) > $(ENV_LOG).s; times > $(ENV_LOG).times ) & prepid=$$!; \
	echo "==> in the background: the oldest matplotlib and the env stage's fresh venvs (log: $(ENV_LOG))"; \
	if ! ( $(MAKE) --no-print-directory install; rc=$$?; times > test-artifacts/install.times; exit $$rc ); then \
	  kill $$prepid; echo "FAILED: install"; exit 1; fi; \
	summary="  install: $$(( $$(date +%s) - t0 )) s, $$(seconds test-artifacts/install.times) CPU-s"; \
	echo "==> [6/6] the browser stage starts now, beside the others (log: $(UI_LOG), printed at the end)"; \
	( uistart=$$(date +%s); $(MAKE) --no-print-directory test-ui > $(UI_LOG) 2>&1; echo $$? > $(UI_LOG).rc; \
	  echo $$(( $$(date +%s) - uistart )) > $(UI_LOG).s; times > $(UI_LOG).times ) & uipid=$$!; \
	for stage in test-unit test-mpl-oldest test-engines test-env test-notebooks; do \
	  if [ $$stage = test-mpl-oldest ]; then while [ ! -e $(ENV_LOG).mplrc ]; do sleep 1; done; cat $(ENV_LOG).mpl; fi; \
	  if [ $$stage = test-env ]; then wait $$prepid; cat $(ENV_LOG); fi; \
	  start=$$(date +%s); \
	  if ( nice -n 19 $(MAKE) --no-print-directory $$stage KVSIM_ENV_PREBUILT=$(abspath $(ENV_PREBUILT)); rc=$$?; \
	       times > test-artifacts/$$stage.times; exit $$rc ); then result=ok; else result=FAILED; failed="$$failed $$stage"; fi; \
	  summary="$$summary\n  $$stage: $$result ($$(( $$(date +%s) - start )) s, $$(seconds test-artifacts/$$stage.times) CPU-s; nice 19)"; \
	done; \
	echo "==> waiting for the browser stage"; wait $$uipid; cat $(UI_LOG); \
	if [ "$$(cat $(UI_LOG).rc 2>/dev/null)" = 0 ]; then result=ok; else result=FAILED; failed="$$failed test-ui"; fi; \
	summary="$$summary\n  test-ui: $$result ($$(cat $(UI_LOG).s 2>/dev/null) s from the install's end, $$(seconds $(UI_LOG).times) CPU-s)"; \
	summary="$$summary\n  background build (beside the install, nice 19): ended $$(cat $(ENV_LOG).s 2>/dev/null) s after the start, $$(seconds $(ENV_LOG).times) CPU-s"; \
	echo; echo "==================== make test summary ===================="; echo -e "$$summary"; \
	cpu; echo "  all stages: $$(( $$(date +%s) - t0 )) s, install included; $$CPU CPU-s in all, the background build included"; \
	if [ -n "$$failed" ]; then echo "FAILED:$$failed"; echo "==========================================================="; exit 1; fi; \
	echo "all stages passed"; echo "==========================================================="

# The background job's two halves (make test runs them; see above).
$(ENV_TOOLS)/.ready:
	$(PYTHON) -m venv --clear $(ENV_TOOLS)
	$(ENV_TOOLS)/bin/python -m pip install -q --disable-pip-version-check pyyaml 'tomli>=2; python_version < "3.11"'
	@touch $@

env-mpl-oldest: $(ENV_TOOLS)/.ready
	$(MAKE) --no-print-directory $(MPL_OLDEST_DIR)/.installed PY=$(abspath $(ENV_TOOLS))/bin/python

env-prebuild: $(ENV_TOOLS)/.ready
	$(ENV_TOOLS)/bin/python tools/check_env.py --build $(ENV_PREBUILT)

test-unit: $(TEST_STAMP)
	@echo "==> [1/6] unit + property tests: pytest $(UNIT_ARGS)"
	$(PY) -m pytest $(UNIT_ARGS)

$(MPL_OLDEST_DIR)/.installed: | $(PY)
	$(PY) -m pip install -q --no-deps --target $(MPL_OLDEST_DIR) 'matplotlib==$(MPL_OLDEST)'
	@touch $@

test-mpl-oldest: $(TEST_STAMP) $(MPL_OLDEST_DIR)/.installed
	@echo '==> [2/6] view tests on the oldest supported matplotlib ($(MPL_OLDEST)): pytest $(MPL_OLDEST_ARGS)'
	PYTHONPATH=$(abspath $(MPL_OLDEST_DIR)) $(PY) -c 'import matplotlib, sys; v = matplotlib.__version__; \
	  print("matplotlib", v, "from", matplotlib.__file__); sys.exit(0 if v.startswith("3.8.") else "not 3.8")'
	KVSIM_DRAWING_TESTS_ONLY=1 PYTHONPATH=$(abspath $(MPL_OLDEST_DIR)) $(PY) -m pytest $(MPL_OLDEST_ARGS)

test-engines: $(TEST_STAMP)
	@echo "==> [3/6] real engines (mlx-lm; transformers + torch CPU; tiny models): pytest $(ENGINES_ARGS)"
	$(PY) -m pytest $(ENGINES_ARGS)

test-env: $(TEST_STAMP)
	@echo "==> [4/6] environment.yml's pip block and kvsim alone, each in a fresh venv: pytest $(ENV_ARGS)"
	KVSIM_ENV_PREBUILT=$(KVSIM_ENV_PREBUILT) $(PY) -m pytest $(ENV_ARGS)

test-notebooks: $(TEST_STAMP)
	@echo "==> [5/6] notebooks under strict nbval, and their structure: pytest $(NBVAL_ARGS)"
	@if ! find notebooks -name '*.ipynb' -not -path '*/.*' | grep -q .; then \
	  echo "!!! no notebooks under notebooks/ yet: nothing for nbval to run"; exit 0; fi; \
	$(PY) -m pytest $(NBVAL_ARGS)

test-ui: $(TEST_STAMP) browser
	@echo "==> [6/6] real browser: pytest $(UI_ARGS)"
	$(PY) -m pytest $(UI_ARGS)

# Debian's chromium (no Playwright browser download). Installed here only as root on Debian; otherwise the
# ui tests skip loudly (or fail when KVSIM_REQUIRE_BROWSER=1, see tests/ui/conftest.py).
browser:
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null || [ -n "$$KVSIM_CHROMIUM" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null; then \
	  echo "==> chromium is missing: installing Debian's chromium with apt-get"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q chromium || { apt-get update -q && apt-get install -y -q chromium; }; \
	else \
	  echo "!!! chromium is missing and cannot be installed here (not root on Debian): install it with"; \
	  echo "!!!   sudo apt-get install chromium   (or set KVSIM_CHROMIUM=/path/to/chromium)"; \
	fi

# Per-cell execution timestamps change on every run and only make diffs noisy: drop old ones, record no new ones.
STRIP_TIMING := import sys, nbformat; nbs = [(p, nbformat.read(p, 4)) for p in sys.argv[1:]]; \
  [c.metadata.pop("execution", None) for _, nb in nbs for c in nb.cells]; [nbformat.write(nb, p) for p, nb in nbs]

notebooks: $(TEST_STAMP)
	@nbs=$$(ls notebooks/[0-9][0-9]_*.ipynb notebooks/solutions/[0-9][0-9]_*.ipynb 2>/dev/null); \
	if [ -z "$$nbs" ]; then echo "no lesson notebooks yet"; exit 0; fi; \
	set -e; \
	$(VENV)/bin/jupytext --sync $$nbs; \
	$(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.record_timing=False \
	  --ExecutePreprocessor.kernel_name=python3 --ExecutePreprocessor.timeout=600 $$nbs; \
	$(PY) -c '$(STRIP_TIMING)' $$nbs; \
	$(VENV)/bin/jupytext --sync $$nbs

bench: $(TEST_STAMP)
	@set -e; for f in benchmarks/*.py; do [ -e "$$f" ] || continue; echo "==> $$f"; $(PY) "$$f"; done

clean:
	rm -rf test-artifacts .pytest_cache build dist *.egg-info $(MPL_OLDEST_DIR) $(ENV_PREBUILT)
