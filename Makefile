# Quick start: `make run` (every method, small profile) and `make test`.
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: venv run test test-all gen status ui clean-venv constraints

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PY) >/dev/null || { echo "need $(PY) on PATH (or make PY=python3)"; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	# torch first and pinned: a CPU wheel of this version lies on disk; anything else pulls CUDA
	$(BIN)/pip install -q torch==2.13.0
	# every other package at the exact version in constraints.txt (same floats on every machine)
	$(BIN)/pip install -q -c constraints.txt torch==2.13.0 -e ".[dev,paper]"
	touch $(STAMP)

venv: $(STAMP)

constraints: venv    ## after a deliberate upgrade: re-pin constraints.txt to what the venv holds
	{ sed -n '/^#/p' constraints.txt; $(BIN)/pip freeze --exclude-editable | grep -iv '^torch=='; } > constraints.txt.new
	mv constraints.txt.new constraints.txt && touch $(STAMP)

run: venv              ## every registered method at the default profile (small)
	$(BIN)/repro run all

test: venv             ## the CI suite: fast tests + every method's smoke run
	# two workers, one test file each (module fixtures stay in one process): the suite is
	# mostly subprocess start-up and single-threaded Python, so 2 cores run it ~25 % faster
	$(BIN)/pytest -m "not slow" -q -n 2 --dist loadfile --durations=30

test-all: venv         ## everything, including slow tests and benchmarks
	$(BIN)/pytest -q

gen: venv              ## rewrite data/<m>/dvc.yaml from the flows/ declarations
	$(BIN)/repro gen

status: venv
	$(BIN)/repro status

ui: venv
	$(BIN)/repro ui
