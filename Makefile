# Skillbus — the two commands a fresh Debian machine needs are `make up` and `make test`.
SWIFT ?= swift
PYTHON ?= python3
CONFIG ?= configs/local.json

.PHONY: deps test-deps build release up test release-test python-package python-test python-bench faults bench \
	bench-test install install-test clean

PREFIX ?= /usr/local

# The headers and pkg-config files of libzmq (Debian's libzmq3-dev), SQLite (libsqlite3-dev), libsodium
# (libsodium-dev: the own ZMTP engine's CURVE boxes), libpq (libpq-dev: a coordinator group's journal), libcurl's
# headers (libcurl4-openssl-dev: the loader in Sources/CCurlRuntime takes its types and option numbers from
# curl/curl.h), and the libcurl.so.4 that the openai planner's HTTP client loads with dlopen when a worker starts
# with it (the binary does not link it; the planner's tests need it); each installed only when missing
# (libcurl4 is libcurl4t64 from Debian 13 on).
deps:
	@pkg-config --exists libzmq || { \
		echo "installing libzmq3-dev"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libzmq3-dev pkg-config; }
	@pkg-config --exists sqlite3 || { \
		echo "installing libsqlite3-dev"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libsqlite3-dev pkg-config; }
	@pkg-config --exists libsodium || { \
		echo "installing libsodium-dev"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libsodium-dev pkg-config; }
	@pkg-config --exists libcurl || { \
		echo "installing libcurl4-openssl-dev"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libcurl4-openssl-dev pkg-config; }
	@pkg-config --exists libpq || { \
		echo "installing libpq-dev"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libpq-dev pkg-config; }
	@{ /sbin/ldconfig -p 2>/dev/null || ldconfig -p; } | grep 'libcurl\.so\.4 ' >/dev/null || { \
		echo "installing libcurl4"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && { $$SUDO apt-get install -y -qq libcurl4 || $$SUDO apt-get install -y -qq libcurl4t64; }; }

# What the tests use besides the build: pyzmq (the Python peers, the fault suite), pytest (the Python
# package's tests), prometheus_client (its parser reads /metrics), websocket-client (it drives Chromium),
# the MCP SDK 2.x (a real MCP client and server: its MCPServer API is 2.x), postgresql (initdb and pg_ctl: the
# coordinator group's tests start a throwaway cluster) and chromium (the dashboard
# test); each installed only when missing, with pip or else Debian's package.
test-deps: deps
	@for module in zmq:pyzmq:python3-zmq pytest:pytest:python3-pytest \
		prometheus_client:prometheus_client:python3-prometheus-client websocket:websocket-client:python3-websocket 'mcp.server.mcpserver:mcp>=2:python3-mcp'; do \
		name=$${module%%:*}; rest=$${module#*:}; package=$${rest%%:*}; debian=$${rest#*:}; \
		$(PYTHON) -c "import $$name" 2>/dev/null && continue; \
		echo "installing $$package"; \
		$(PYTHON) -m pip install --quiet "$$package" 2>/dev/null || { \
			SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
			$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $$debian; }; \
	done
	@{ command -v initdb || ls /usr/lib/postgresql/*/bin/initdb; } >/dev/null 2>&1 || { \
		echo "installing postgresql (the coordinator group's tests start a throwaway cluster)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		{ $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; } \
			|| echo "postgresql could not be installed: the coordinator group's tests will be skipped"; }
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing chromium (the dashboard test opens the page in it)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		{ $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
			|| echo "chromium could not be installed: the dashboard browser test will be skipped"; }

build: deps
	$(SWIFT) build

# Linked with the static Swift standard library and Foundation: it starts where no Swift toolchain is
# (it needs only libzmq5, libsqlite3-0 and libpq5, and libcurl4 where a worker uses the openai planner, which loads
# it at run time), and an idle coordinator holds about 19 MB instead of 26 (no relocated shared Swift
# libraries in memory).
# Linked by GNU ld with its relative relocations packed (DT_RELR, release-toolset.json) where /usr/bin/ld.bfd
# is there: the 1.8 MB table that the position-independent binary reads once as it starts becomes 35 KB,
# so every skillbus process holds about 1.6 MB less. Swift's default linker, gold, cannot pack them; an
# ld.bfd too old to know the option warns and ignores it.
RELEASE_TOOLSET := $(shell [ -x /usr/bin/ld.bfd ] && echo --toolset release-toolset.json)
release: deps
	$(SWIFT) build -c release --static-swift-stdlib $(RELEASE_TOOLSET) --product skillbus

# The main job: a coordinator and three workers on this machine. Ctrl-C stops them all.
up: release
	.build/release/skillbus up --config $(CONFIG)

# Every test: unit tests and integration tests with real processes on 127.0.0.1 (skillbus-perf's full
# figures only in `make bench-test`), then the Python package's tests and the fault suite's short form
# (two seconds of each fault; the probe's p99 is printed, not checked).
# The integration tests run the built `skillbus` and `skillbus-perf`, so build them first. The unit tests run in parallel; the
# integration tests one at a time, since each starts its own processes and two cores shared by dozens of
# them turn waits for events into timeouts.
# A crash's backtrace shows the crashed thread alone, without registers and images, and crash-tail.sh prints its
# top frames once more at the end: CI keeps only the end of the output.
test: export SWIFT_BACKTRACE ?= threads=crashed,registers=none,images=none
test: test-deps
	$(SWIFT) build
	Tests/crash-tail.sh .build/unit-tests.log $(SWIFT) test --filter SkillbusTests
	Tests/crash-tail.sh .build/integration-tests.log $(SWIFT) test --skip-build --no-parallel --filter SkillbusIntegrationTests
	$(MAKE) python-test
	$(PYTHON) Tests/faults/fault_suite.py --short --binary .build/debug/skillbus

# The integration tests, the Python package's tests and the fault suite's short form again, every process the release
# binary that `make up` and `make install` build: optimised code can do what the debug build never does (a Swift 6.3
# release build once lost which agent each answer of `skillbus history` came from). Left out of `make test`: the
# release build takes minutes.
release-test: export SWIFT_BACKTRACE ?= threads=crashed,registers=none,images=none
release-test: test-deps release
	$(SWIFT) build
	SKILLBUS_BINARY=$(CURDIR)/.build/release/skillbus Tests/crash-tail.sh .build/release-integration-tests.log \
		$(SWIFT) test --skip-build --no-parallel --filter SkillbusIntegrationTests
	SKILLBUS_BINARY=$(CURDIR)/.build/release/skillbus $(MAKE) python-test
	$(PYTHON) Tests/faults/fault_suite.py --short --binary .build/release/skillbus

# The Python package (clients/python), installed with pip into a folder of its own (PYTHONPATH=.build/python-package).
python-package:
	rm -rf .build/python-package
	PIP_ROOT_USER_ACTION=ignore $(PYTHON) -m pip install --quiet --disable-pip-version-check --no-deps --target .build/python-package ./clients/python

# Its pytest tests against the debug build's coordinator and workers (they need pyzmq and pytest:
# .ci/run installs them).
python-test: python-package
	PYTHONPATH=$(CURDIR)/.build/python-package $(PYTHON) -m pytest -q -p no:cacheprovider clients/python/tests

# What the package costs against a bare pyzmq client, and a Python worker against a Swift one, one
# request in flight (bench.py); then under load against pyzmq baselines (bench_load.py): the client and
# quick workers at 64 in flight against a zmq.proxy with REP workers, and fan-out rounds against a
# Majordomo broker in Python (Tests/perf). Ratios measured in one run with the release binary (about
# two minutes in all).
python-bench: release python-package
	SKILLBUS_BINARY=$(CURDIR)/.build/release/skillbus PYTHONPATH=$(CURDIR)/.build/python-package $(PYTHON) clients/python/bench.py
	SKILLBUS_BINARY=$(CURDIR)/.build/release/skillbus PYTHONPATH=$(CURDIR)/.build/python-package $(PYTHON) clients/python/bench_load.py

# The fault suite's long form (about five minutes: 60 s of fuzzing, 10 s of each other fault), its
# figures printed case by case; fails when one is wrong. Then the coordinator's own faults (kill -9 and
# restart five times under load, a round id across a restart), which JournalClusterTests runs with the
# Swift client's resend (they are in make test too).
faults: test-deps
	$(SWIFT) build
	$(PYTHON) Tests/faults/fault_suite.py --binary .build/debug/skillbus
	$(SWIFT) test --filter JournalClusterTests

# The team's benchmark: skillbus-perf (a tool of its own, not part of the product) measures every figure the
# performance work tracks on the release skillbus, which it starts as coordinators and workers. Built like
# `release`, so both share one build.
bench: release
	$(SWIFT) build -c release --static-swift-stdlib $(RELEASE_TOOLSET) --product skillbus-perf
	.build/release/skillbus-perf --skillbus .build/release/skillbus --workers 4

# The test of skillbus-perf's full figures (about ten seconds), left out of `make test`, which runs a small
# smoke test of it instead. `swift build` builds skillbus-perf beside skillbus.
bench-test: deps
	$(SWIFT) build
	SKILLBUS_BENCH_TESTS=1 $(SWIFT) test --filter benchReports

# The release binary (see `release`). The units in deploy/ go to $(PREFIX)/lib/systemd/system (where
# systemd looks for /usr/local), naming this binary.
install: release
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/systemd/system $(DESTDIR)$(PREFIX)/share/doc/skillbus/deploy
	install -s -m 0755 .build/release/skillbus $(DESTDIR)$(PREFIX)/bin/skillbus
	for unit in deploy/*.service; do \
		sed 's#/usr/local/bin/skillbus#$(PREFIX)/bin/skillbus#' $$unit > $(DESTDIR)$(PREFIX)/lib/systemd/system/$$(basename $$unit); \
		chmod 0644 $(DESTDIR)$(PREFIX)/lib/systemd/system/$$(basename $$unit); \
	done
	install -m 0644 deploy/README.md $(DESTDIR)$(PREFIX)/share/doc/skillbus/deploy/README.md

# Installs into a temporary PREFIX and checks the binary runs without the toolchain and without libcurl (ldd,
# and readelf for the libraries it names itself; as root, in a mount namespace that hides the toolchain and
# libcurl). Left out of `make test`: the static release build takes minutes.
install-test: deps
	bash Tests/install/install-test.sh

clean:
	rm -rf .build
