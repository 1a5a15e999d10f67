# replychain: `make run` starts the bot, `make test` runs every check.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# One stamp per lock file: a change to it (or to pyproject.toml) reinstalls.
RUNTIME_STAMP := $(VENV)/.runtime-stamp
DEV_STAMP := $(VENV)/.dev-stamp
LOCAL_REDIS_PORT := 6390
LOCAL_REDIS_URL := redis://127.0.0.1:$(LOCAL_REDIS_PORT)/0
LOCAL_REDIS_PIDFILE := data/redis.pid
# `make upgrade` / `make lock` rewrite the lock files with pip-tools.
PIP_COMPILE := CUSTOM_COMPILE_COMMAND="make upgrade" $(BIN)/pip-compile --quiet --strip-extras \
	--no-emit-index-url --no-emit-find-links

.PHONY: run stop test install dev-install redis-server chromium check-config lint typecheck pytest soak \
	bench upgrade lock clean i18n

# Runtime dependencies only, pinned by requirements.txt (the systemd / production path).
install: $(RUNTIME_STAMP)

# Runtime and development tools, pinned by requirements-dev.txt.
dev-install: $(DEV_STAMP)

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "replychain needs Python 3.11 or newer (found $$($(PYTHON) --version))."; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Installs the pinned set, then the project itself without letting pip pick
# anything else; `pip check` then catches a dependency pyproject.toml names that
# the lock file lacks (run `make lock`).
define install_locked
	$(BIN)/pip install --quiet -r $(1)
	$(BIN)/pip install --quiet --no-deps -e .
	@if $(BIN)/pip check 2>/dev/null | grep -i '^replychain '; then \
		echo "$(1) lacks a dependency of pyproject.toml: run 'make lock'"; exit 1; fi
	@touch $(2)
endef

$(RUNTIME_STAMP): requirements.txt pyproject.toml | $(BIN)/python
	$(call install_locked,requirements.txt,$@)

$(DEV_STAMP): requirements-dev.txt pyproject.toml | $(BIN)/python
	$(call install_locked,requirements-dev.txt,$@)

# Refresh the lock files to the newest versions pyproject.toml allows.
upgrade: | $(BIN)/python
	$(BIN)/pip install --quiet pip-tools
	$(PIP_COMPILE) --upgrade --output-file requirements.txt pyproject.toml
	$(PIP_COMPILE) --upgrade --extra dev --constraint requirements.txt \
		--output-file requirements-dev.txt pyproject.toml

# Bring the lock files in line with pyproject.toml, changing as few pins as possible.
lock: | $(BIN)/python
	$(BIN)/pip install --quiet pip-tools
	$(PIP_COMPILE) --output-file requirements.txt pyproject.toml
	$(PIP_COMPILE) --extra dev --constraint requirements.txt \
		--output-file requirements-dev.txt pyproject.toml

# The bot's own texts (bot/i18n.py): extract the message ids of the code into the
# template, bring every language's catalogue in line with it, compile them. The .mo
# files are committed beside the .po files, so an install needs no step of its own.
# A new language: `$(BIN)/pybabel init -D replychain -i bot/locales/replychain.pot
# -d bot/locales -l <code>`, translate its .po, then `make i18n` (docs/operating.md).
LOCALES := bot/locales
i18n: dev-install
	$(BIN)/pybabel extract --no-default-keywords -k N_ -k _ -k ngettext:1,2 \
		--add-location=file --sort-by-file --project=replychain --no-wrap \
		--msgid-bugs-address="" --copyright-holder="" -o $(LOCALES)/replychain.pot.new bot
	@# a template differing only in its creation date is left as it was
	@if diff -q -I '^"POT-Creation-Date' $(LOCALES)/replychain.pot $(LOCALES)/replychain.pot.new \
		>/dev/null 2>&1; then rm $(LOCALES)/replychain.pot.new; \
	else mv $(LOCALES)/replychain.pot.new $(LOCALES)/replychain.pot; fi
	$(BIN)/pybabel update -D replychain -i $(LOCALES)/replychain.pot -d $(LOCALES) \
		--ignore-pot-creation-date --no-wrap --ignore-obsolete
	$(BIN)/pybabel compile -D replychain -d $(LOCALES) --statistics

# Install redis-server through the system package manager when it is missing.
redis-server:
	@if ! command -v redis-server >/dev/null 2>&1; then \
		echo "redis-server not found: installing it"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo"; \
		if command -v apt-get >/dev/null 2>&1; then \
			$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server; \
		elif command -v dnf >/dev/null 2>&1; then $$SUDO dnf install -y redis; \
		elif command -v apk >/dev/null 2>&1; then $$SUDO apk add redis; \
		elif command -v brew >/dev/null 2>&1; then brew install redis; \
		else echo "Please install redis-server (https://redis.io/docs/latest/operate/oss_and_stack/install/)"; exit 1; fi; \
	fi

# Install Debian's chromium for the viewer's browser tests when it is missing (the
# only browser the tests use: nothing is downloaded from anywhere else).
chromium:
	@if ! command -v chromium >/dev/null 2>&1; then \
		echo "chromium not found: installing it (the viewer's browser tests)"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo"; \
		if command -v apt-get >/dev/null 2>&1; then \
			$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; \
		else echo "Please install chromium (the browser tests run it headless)"; exit 1; fi; \
	fi

lint: dev-install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: dev-install
	$(BIN)/mypy

# Tests run in parallel workers (pytest-xdist), each with its own redis-server; the
# browser tests share one worker (one browser). `.venv/bin/pytest tests/test_x.py`
# runs one file in one process.
pytest: dev-install redis-server chromium
	$(BIN)/pytest --numprocesses auto --maxprocesses 4 --dist loadgroup

test: dev-install redis-server lint typecheck pytest

# The chaos soak (not part of `make test`): the real bot killed at random, Redis
# restarted, model and Telegram faults; every message answered once on its chain.
# `make soak SEEDS="1 2 3" MINUTES=8` runs one soak per seed; SOAK_ARGS passes more
# options, e.g. SOAK_ARGS="--processes 3 --webhook" or SOAK_ARGS="--cluster".
SEEDS ?= 1
MINUTES ?= 8
SOAK_ARGS ?=
soak: dev-install redis-server
	@for seed in $(SEEDS); do \
		$(BIN)/python -m bench.soak --seed $$seed --minutes $(MINUTES) $(SOAK_ARGS) || exit 1; \
	done

# A quick run (tens of seconds) by default; `make bench FULL=1` for the full sizes.
bench: dev-install redis-server
	$(BIN)/python -m bench $(if $(FULL),--full)

# Checks the settings (environment and .env) without starting anything.
check-config: install
	$(BIN)/python -m bot check-config

# Runs the bot. Settings are checked first: a missing or invalid one stops here
# with one line, before any redis-server is started. When REDIS_URL is set
# neither in the environment nor in .env, a local redis-server is started from
# config/redis.conf (data under ./data/); it keeps running after the bot exits,
# for the next `make run`: `make stop` stops it.
run: install
	@mode=$$($(BIN)/python -m bot check-config --redis-mode) || exit $$?; \
	if [ "$$mode" = local ]; then \
		$(MAKE) --no-print-directory redis-server || exit 1; \
		mkdir -p data; \
		if ! redis-cli -p $(LOCAL_REDIS_PORT) ping >/dev/null 2>&1; then \
			echo "starting local redis-server on 127.0.0.1:$(LOCAL_REDIS_PORT) (data in ./data/; 'make stop' stops it)"; \
			redis-server config/redis.conf --port $(LOCAL_REDIS_PORT) --dir "$$(pwd)/data" \
				--daemonize yes --pidfile "$$(pwd)/$(LOCAL_REDIS_PIDFILE)" \
				--logfile "$$(pwd)/data/redis.log" || exit 1; \
			for i in $$(seq 50); do redis-cli -p $(LOCAL_REDIS_PORT) ping >/dev/null 2>&1 && break; sleep 0.1; done; \
		fi; \
		export REDIS_URL=$(LOCAL_REDIS_URL); \
	fi; \
	exec $(BIN)/python -m bot

# Stops the local redis-server `make run` started (its data stays in ./data/).
stop:
	@pidfile=$(LOCAL_REDIS_PIDFILE); \
	if [ ! -f "$$pidfile" ]; then echo "no local redis-server to stop ($$pidfile not found)"; exit 0; fi; \
	pid=$$(cat "$$pidfile"); \
	if ! kill -0 "$$pid" 2>/dev/null || ! ps -p "$$pid" -o comm= 2>/dev/null | grep -q redis; then \
		echo "local redis-server is not running; removing the stale $$pidfile"; rm -f "$$pidfile"; exit 0; \
	fi; \
	echo "stopping local redis-server (pid $$pid)"; \
	kill -TERM "$$pid"; \
	for i in $$(seq 100); do kill -0 "$$pid" 2>/dev/null || break; sleep 0.1; done; \
	if kill -0 "$$pid" 2>/dev/null; then echo "redis-server (pid $$pid) did not stop within 10 s"; exit 1; fi; \
	rm -f "$$pidfile"

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
