PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PROFILE ?= paper
JOBS ?= 2
TEST_JOBS ?= 2          # pytest-xdist workers of the slow tier (its tests are independent processes' work)
EXTRAS ?= dev,text,hybrid,launchers,docs
export CERTDP_DATA_DIR ?= $(if $(wildcard ../shared/data),$(abspath ../shared/data),)

.PHONY: install lint test test-slow test-all wheel-check docs bench reproduce-figures clean delete-outputs

install:                # a venv with torch 2.13.0 (the measured version) and certdp editable with $(EXTRAS)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[$(EXTRAS)]' torch==2.13.0

lint:                   # ruff (pinned in the dev extra; rules in pyproject.toml): pyflakes and pycodestyle's E7/E9
	$(BIN)/ruff check .

test:                   # the fast tier (<= 90 s on 2 cores): every module, the soundness oracles on small cases
	$(BIN)/python -m pytest -m "not slow"

test-slow:              # the tests marked slow (long end-to-end runs, the wheel build), on $(TEST_JOBS) workers
	$(BIN)/python -m pytest -m slow -n $(TEST_JOBS)

test-all: test test-slow   # everything: the fast tier first, then the slow one (what CI runs)

wheel-check:            # the built wheel in a fresh venv runs `certdp agtr dataset=linear` from an empty folder
	bash .ci/wheel-check $(PY)

docs:                   # the docs site into build/site; --strict fails on a broken internal link
	$(BIN)/mkdocs build --strict --site-dir build/site

bench:                  # one table: AGT s/step on the CPU and, where torch sees one, the GPU (QUICK=1: small shapes)
	$(BIN)/python benchmarks/bench_table.py $(if $(QUICK),--quick,)

reproduce-figures:
	$(BIN)/certdp figures profile=$(PROFILE) jobs=$(JOBS)

clean:                  # build artefacts only (test cache, docs site, wheels); never a run under outputs/
	rm -rf .pytest_cache build dist

delete-outputs:         # DELETES every run under outputs/ (your results): only by this name, never by clean
	@echo "deleting every run under outputs/: $$(ls -d outputs/*/ 2>/dev/null | wc -l) folder(s)"
	rm -rf outputs/*/
