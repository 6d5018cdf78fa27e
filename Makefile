# Every target sets up .venv itself, so a fresh clone needs only python3 and the package registries.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench fuzz lint clean venv sysdeps

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,all]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/jha run --config config/demo.yaml --once

# The plant-wide service on this machine (tests/fleet/demo.py): a broker, a throwaway PostgreSQL
# cluster, three simulated agents and `jha fleet`; prints the plan's address. Ctrl-C ends it.
.PHONY: fleet-demo
fleet-demo: $(STAMP) sysdeps
	$(PY) -m tests.fleet.demo

# Debian packages the protocol peers need (socat, iproute2, ...), installed only when missing;
# then node-opcua, the second OPC UA server peer, from the npm registry at the locked versions.
NODE_PEER := tests/peers/opcua_node
NODE_STAMP := $(NODE_PEER)/node_modules/.installed
sysdeps: $(NODE_STAMP)
	scripts/system-deps.sh
	scripts/linuxcnc-rs274.sh var/linuxcnc

$(NODE_STAMP): $(NODE_PEER)/package-lock.json
	scripts/system-deps.sh
	cd $(NODE_PEER) && npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

# The UR emulator tests judge timing at the 2 ms RTDE period: they run first and alone; the rest
# on 4 processes (most of their time is spent waiting on peers and subprocesses). One summary
# table at the end: the first run leaves its rows in SUMMARY, the second adds its own.
# Every process a test starts inherits JHA_TEST_RUN; tests/support/leftovers.py then fails the
# run if any of them is still running (and kills it).
SUMMARY := var/test-summary.json
# Cases per fuzz target in make test (make fuzz runs FUZZ_CASES, 100,000 by default).
TEST_FUZZ_CASES ?= 500
test: $(STAMP) sysdeps lint
	mkdir -p var && rm -f $(SUMMARY)
	export JHA_TEST_RUN=$$$$-$$(date +%s%N); \
	JHA_SUMMARY_FILE=$(SUMMARY) JHA_SUMMARY_QUIET=1 $(PY) -m pytest -q -m realtime; \
	realtime=$$?; \
	FUZZ_CASES=$(TEST_FUZZ_CASES) JHA_SUMMARY_FILE=$(SUMMARY) \
	  $(PY) -m pytest -q -m "not realtime" -n 4 --dist loadfile; \
	rest=$$?; \
	$(PY) -m tests.support.leftovers; \
	leftovers=$$?; \
	echo "make test: realtime part exit $$realtime, the rest exit $$rest, leftovers exit $$leftovers"; \
	test $$realtime -eq 0 && test $$rest -eq 0 && test $$leftovers -eq 0

bench: $(STAMP) sysdeps
	$(PY) -m bench

# The fuzz targets of `make test` (2,000 cases each there) at FUZZ_CASES cases per target;
# the atheris (coverage-guided) ones at ATHERIS_RUNS inputs each.
FUZZ_CASES ?= 100000
ATHERIS_RUNS ?= $(FUZZ_CASES)
fuzz: $(STAMP)
	$(PY) -m tests.fuzz --cases $(FUZZ_CASES) --atheris-runs $(ATHERIS_RUNS)

# Style, types, and the architecture: import-linter checks the layers and that nothing imports in
# a cycle (contracts in pyproject.toml, [tool.importlinter]).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy agent drivers
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) var build *.egg-info $(NODE_PEER)/node_modules

# Install as a systemd service (docs/service.md); as root, or into DESTDIR= for a staged tree.
# PREFIX, SYSCONFDIR, UNITDIR, SYSUSERSDIR, PYTHON, EXTRAS, JHA_DEPS_SITE: see scripts/install.sh.
INSTALL_VARS = DESTDIR='$(DESTDIR)' PREFIX='$(PREFIX)' SYSCONFDIR='$(SYSCONFDIR)' \
	UNITDIR='$(UNITDIR)' SYSUSERSDIR='$(SYSUSERSDIR)' JHA_DEPS_SITE='$(JHA_DEPS_SITE)' EXTRAS='$(EXTRAS)'
.PHONY: install uninstall
install:
	$(INSTALL_VARS) $(if $(INSTALL_PYTHON),PYTHON='$(INSTALL_PYTHON)') scripts/install.sh

uninstall:
	$(INSTALL_VARS) scripts/uninstall.sh
