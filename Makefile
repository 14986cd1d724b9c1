# Everything a newcomer needs: `make run` and `make test`. Both set the project up first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

NODE_CLIENTS := tests/clients
NODE_STAMP   := $(NODE_CLIENTS)/node_modules/.installed

SARAMA_SRC    := $(wildcard tests/clients/sarama/*.go)
SARAMA_DRIVER := tests/clients/sarama/bin/sarama-driver

.PHONY: install system-deps node-deps go-deps run test test-fast lint bench bench-omb bench-idle bench-audit clean

install: $(STAMP)

# setup.py builds the C extensions (protocol/_recscan.c, policies/_digits.c) into the checkout.
$(STAMP): pyproject.toml setup.py protocol/_recscan.c policies/_digits.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# Test-only programs from Debian: kcat. A Java 17 JDK (Spark; tests/X500Names.java and
# tests/SslRules.java, run as source files) is expected on the machine.
system-deps:
	@command -v kcat >/dev/null 2>&1 || { \
	  echo "installing kcat from Debian"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq kcat >/dev/null; }

# Test-only Node.js clients (KafkaJS), pinned by tests/clients/package-lock.json; node and
# npm from Debian when the machine lacks them. Installed again only when the lock changes.
node-deps: $(NODE_STAMP)

$(NODE_STAMP): $(NODE_CLIENTS)/package.json $(NODE_CLIENTS)/package-lock.json
	@command -v npm >/dev/null 2>&1 || { \
	  echo "installing nodejs and npm from Debian"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq nodejs npm >/dev/null; }
	npm ci --prefix $(NODE_CLIENTS) --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

# Test-only Go client: Sarama 1.22 from Debian (golang-github-shopify-sarama-dev and its
# dependencies, as Go sources under /usr/share/gocode; Go itself from golang-go), installed when
# missing. The driver (tests/clients/sarama/*.go) is built offline from those sources, without
# modules, into tests/clients/sarama/bin/ (git-ignored), again only when a source changes.
go-deps: $(SARAMA_DRIVER)

$(SARAMA_DRIVER): $(SARAMA_SRC)
	@{ command -v go >/dev/null 2>&1 && [ -d /usr/share/gocode/src/github.com/Shopify/sarama ]; } || { \
	  echo "installing golang-go and Sarama from Debian"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO apt-get install -y -qq golang-go golang-github-shopify-sarama-dev >/dev/null; }
	cd tests/clients/sarama && GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= \
	  CGO_CFLAGS="-O2 -Wno-deprecated-declarations" go build -o bin/sarama-driver .

# --pid-file: `kpg reload --pid-file var/kpg.pid` from another shell applies an edited config.
run: install
	$(VENV)/bin/kpg run --config deploy/gateway.example.yaml --pid-file var/kpg.pid

# --durations: CI's log names the slowest tests (the suite must stay under CI's 30 minutes).
test: install system-deps node-deps go-deps lint
	$(PY) -m pytest --durations=25

test-fast: install
	$(PY) -m pytest -m "unit"

lint: install
	$(VENV)/bin/ruff check gateway protocol policies spark_audit tests bench setup.py
	$(VENV)/bin/ruff format --check gateway protocol policies spark_audit tests bench setup.py
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

bench: install
	$(PY) bench/produce_bench.py

# OpenMessaging-Benchmark-style: direct vs through the gateway, 10x10 topics (about 10 minutes)
bench-omb: install
	$(PY) bench/omb.py

# Gateway memory with 1,000, 5,000 and 10,000 idle client connections
bench-idle: install
	$(PY) bench/idle_connections.py

# kpg audit stream and report on 1,000,000 synthetic events (spark_audit/README.md)
bench-audit: install
	$(PY) bench/audit_bench.py --workers 0

clean:
	rm -rf $(VENV) $(NODE_CLIENTS)/node_modules $(dir $(SARAMA_DRIVER)) .pytest_cache .mypy_cache .ruff_cache build protocol/_recscan.*.so policies/_digits.*.so
