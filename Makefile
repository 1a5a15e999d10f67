# replychain: `make run` starts the bot, `make test` runs every check.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
LOCAL_REDIS_PORT := 6390
LOCAL_REDIS_URL := redis://127.0.0.1:$(LOCAL_REDIS_PORT)/0

.PHONY: run test install redis-server lint typecheck pytest bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "replychain needs Python 3.11 or newer (found $$($(PYTHON) --version))."; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

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

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

pytest: install redis-server
	$(BIN)/pytest

test: install redis-server lint typecheck pytest

bench: install redis-server
	$(BIN)/python -m bench

# Runs the bot. When REDIS_URL is set neither in the environment nor in .env,
# a local redis-server is started from config/redis.conf (data under ./data/).
run: install
	@url="$${REDIS_URL:-}"; \
	if [ -z "$$url" ] && [ -f .env ]; then url=$$(sed -n 's/^[[:space:]]*REDIS_URL[[:space:]]*=[[:space:]]*//p' .env | tail -n1); fi; \
	if [ -z "$$url" ]; then \
		$(MAKE) --no-print-directory redis-server || exit 1; \
		mkdir -p data; \
		if ! redis-cli -p $(LOCAL_REDIS_PORT) ping >/dev/null 2>&1; then \
			echo "starting local redis-server on 127.0.0.1:$(LOCAL_REDIS_PORT) (data in ./data/)"; \
			redis-server config/redis.conf --port $(LOCAL_REDIS_PORT) --dir "$$(pwd)/data" \
				--daemonize yes --pidfile "$$(pwd)/data/redis.pid" --logfile "$$(pwd)/data/redis.log" || exit 1; \
			for i in $$(seq 50); do redis-cli -p $(LOCAL_REDIS_PORT) ping >/dev/null 2>&1 && break; sleep 0.1; done; \
		fi; \
		export REDIS_URL=$(LOCAL_REDIS_URL); \
	fi; \
	exec $(BIN)/python -m bot

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
