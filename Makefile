PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PROFILE ?= paper
JOBS ?= 2
export CERTDP_DATA_DIR ?= $(if $(wildcard ../shared/data),$(abspath ../shared/data),)

.PHONY: install test bench reproduce-figures clean

install:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,text,hybrid,launchers]' torch==2.13.0

test:
	$(BIN)/python -m pytest

bench:                  # one table: AGT s/step on the CPU and, where torch sees one, the GPU (QUICK=1: small shapes)
	$(BIN)/python benchmarks/bench_table.py $(if $(QUICK),--quick,)

reproduce-figures:
	$(BIN)/certdp figures profile=$(PROFILE) jobs=$(JOBS)

clean:
	rm -rf outputs/*/ .pytest_cache
