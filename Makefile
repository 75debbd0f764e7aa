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

.PHONY: help install prereqs up down test lint typecheck unit integration demo bench clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(BIN)/ares: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

install: $(BIN)/ares  ## virtualenv with ares-mesh and its dev tools

prereqs:  ## check (and as root, install) Java, Maven and PostgreSQL
	@scripts/install-prereqs.sh

up: install prereqs  ## start the local Kafka broker and PostgreSQL
	$(BIN)/ares dev up

down: install  ## stop them
	$(BIN)/ares dev down

lint: install  ## ruff
	$(BIN)/ruff check services tests $(wildcard bench) $(wildcard scripts)

typecheck: install  ## mypy --strict on the package
	$(BIN)/mypy

test: up lint typecheck  ## THE test command: infrastructure, ruff, mypy, the whole pytest suite
	$(BIN)/pytest -ra

unit: install  ## only the tests that need no infrastructure
	$(BIN)/pytest -ra tests/unit

demo: up  ## THE main job: a fleet of agents, a worker SIGKILLed mid-task, the fleet resurrected
	$(BIN)/ares demo

bench: up  ## every benchmark, one JSON report
	$(BIN)/ares bench

clean:  ## remove the virtualenv and caches (not the dev environment's data)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

.PHONY: deploy-check
deploy-check: install  ## the deployment checks: hadolint, Compose schema, helm lint/template + kubernetes-validate (builds helm once)
	$(BIN)/pytest -ra tests/deploy
