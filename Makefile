# The two commands of the README: `make demo` (the main job) and `make test` (the suite).
# Each installs what it needs: a virtualenv with the package, Java/Maven/PostgreSQL checks,
# the broker jars from Maven Central, and the local broker and database.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
# Helm is built from source with Go (tests/deploy): the official Go install location.
GO_BIN := $(wildcard /usr/local/go/bin)
ifneq ($(GO_BIN),)
export PATH := $(PATH):$(GO_BIN)
endif

.PHONY: help install native prereqs up down test lint typecheck unit unit-pure integration demo bench clean

# The append path compiled to C in place by mypyc (services/ares/native.py says which modules
# and why). Rebuilt whenever one of their sources changes: Python would otherwise go on
# importing the old extension. ARES_PURE_PYTHON=1 builds nothing and runs the source.
NATIVE_SOURCES := $(shell $(PYTHON) services/ares/native.py)
NATIVE_STAMP := build/native.stamp
ifeq ($(ARES_PURE_PYTHON),)
export ARES_EXPECT_NATIVE := 1
endif

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(BIN)/ares: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip 'setuptools>=77'  # setup.py build_ext runs here
	ARES_PURE_PYTHON=1 $(BIN)/pip install -q -e '.[dev]'  # compiled by `native`, once
	@touch $@

$(NATIVE_STAMP): $(NATIVE_SOURCES) setup.py $(BIN)/ares
ifeq ($(ARES_PURE_PYTHON),)
	$(BIN)/python setup.py -q build_ext --inplace --force
	@mkdir -p $(@D) && touch $@
endif

native: $(NATIVE_STAMP)  ## compile the append path in place (mypyc, ~30 s)

install: $(BIN)/ares native  ## virtualenv with ares-mesh (append path compiled) and its dev tools

prereqs:  ## check (and as root, install) Java, Maven and PostgreSQL
	@scripts/install-prereqs.sh

up: install prereqs  ## start the local Kafka broker and PostgreSQL
	$(BIN)/ares dev up

down: install  ## stop them
	$(BIN)/ares dev down

lint: install  ## ruff
	$(BIN)/ruff check services tests $(wildcard bench) $(wildcard scripts) setup.py

typecheck: install  ## mypy --strict on the package and the benchmarks
	$(BIN)/mypy
	$(BIN)/mypy bench

test: up lint typecheck unit-pure  ## THE test command: infrastructure, ruff, mypy, the whole pytest suite
	$(BIN)/pytest -ra --durations=20

# The same modules as Python, as they run where no C compiler built them (ARES_PURE_PYTHON
# at run time imports them from source).
unit-pure: install  ## the unit tests against the pure-Python build of the append path
	ARES_PURE_PYTHON=1 ARES_EXPECT_NATIVE= $(BIN)/pytest -q -p no:cacheprovider tests/unit

unit: install  ## only the tests that need no infrastructure
	$(BIN)/pytest -ra tests/unit

demo: up  ## THE main job: a fleet of agents, a worker SIGKILLed mid-task, the fleet resurrected
	$(BIN)/ares demo

bench: up  ## every benchmark, one JSON report
	$(BIN)/ares bench

clean:  ## remove the virtualenv and caches (not the dev environment's data)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build
	find services -name '*.so' -delete

.PHONY: deploy-check
deploy-check: install  ## the deployment checks: hadolint, Compose schema, helm lint/template + kubernetes-validate (builds helm once)
	$(BIN)/pytest -ra tests/deploy
