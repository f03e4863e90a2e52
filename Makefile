# Skillbus — the two commands a fresh Debian machine needs are `make up` and `make test`.
SWIFT ?= swift
CONFIG ?= configs/local.json

.PHONY: deps build release up test bench bench-test clean

# The headers and pkg-config files of libzmq (Debian's libzmq3-dev) and SQLite (libsqlite3-dev), and
# libcurl, which the toolchain's FoundationNetworking loads (the openai planner's HTTP); for the tests,
# prometheus_client, websocket-client and chromium; each installed only when missing (libcurl4 is
# libcurl4t64 from Debian 13 on).
deps:
	@pkg-config --exists libzmq || { \
		echo "installing libzmq3-dev"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libzmq3-dev pkg-config; }
	@pkg-config --exists sqlite3 || { \
		echo "installing libsqlite3-dev"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libsqlite3-dev pkg-config; }
	@{ /sbin/ldconfig -p 2>/dev/null || ldconfig -p; } | grep 'libcurl\.so\.4 ' >/dev/null || { \
		echo "installing libcurl4"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && { $$SUDO apt-get install -y -qq libcurl4 || $$SUDO apt-get install -y -qq libcurl4t64; }; }
	@python3 -c "import prometheus_client" 2>/dev/null || { \
		echo "installing prometheus_client (its parser checks /metrics in the tests)"; \
		python3 -m pip install --quiet prometheus_client; }
	@python3 -c "import websocket" 2>/dev/null || { \
		echo "installing websocket-client (the dashboard test drives Chromium with it)"; \
		python3 -m pip install --quiet websocket-client; }
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing chromium (the dashboard test opens the page in it)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		{ $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
			|| echo "chromium could not be installed: the dashboard browser test will be skipped"; }

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release --product skillbus

# The main job: a coordinator and three workers on this machine. Ctrl-C stops them all.
up: release
	.build/release/skillbus up --config $(CONFIG)

# Every test: unit tests and integration tests with real processes on 127.0.0.1 (the full bench
# figures only in `make bench-test`).
# The integration tests run the built `skillbus`, so build it first.
test: deps
	$(SWIFT) build
	$(SWIFT) test

bench: release
	.build/release/skillbus bench --workers 4

# The full-figure bench test (about ten seconds), left out of `make test`, which runs a small bench
# smoke test instead.
bench-test: deps
	$(SWIFT) build
	SKILLBUS_BENCH_TESTS=1 $(SWIFT) test --filter benchReports

clean:
	rm -rf .build
