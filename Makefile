# Every target installs what it needs first (`deps`), so on a fresh Debian machine
# `make jitter` and `make test` are the only two commands.
SWIFT      ?= swift
# C warnings live here, not in Package.swift: SwiftPM rejects unsafeFlags in dependencies.
# -Werror goes first: SwiftPM 6.3 rejects it as the last argument.
CWARNINGS  := -Xcc -Werror -Xcc -Wall -Xcc -Wextra
# The CLI and its measurements are the Benchmarks package's, so the library's own package
# has no dependencies.
TOOLS      := Benchmarks
RELEASE    := $(SWIFT) build -c release $(CWARNINGS) --package-path $(TOOLS) --product metronome
CLI        := $(TOOLS)/.build/release/metronome
ARGS       ?=
UBSAN_DIR  := $(shell dirname $$(clang -print-file-name=libclang_rt.ubsan_standalone-x86_64.so 2>/dev/null) 2>/dev/null)

.PHONY: deps build test test-engineless test-tsan test-asan test-ubsan-c check-aarch64 jitter coalesce scale stress stress-ci bench bench-server smoke-server plot format lint docs

deps:
	@pkg-config --exists libevent || { \
		echo "metronome: installing libevent-dev (Debian's package)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libevent-dev pkg-config; }

build: deps
	$(SWIFT) build $(CWARNINGS)

# The test suite, after the Swift library's layers are checked (scripts/check-layers.sh)
# and the README, CHANGELOG and CLI found to name one version (scripts/check-versions.sh):
# state machine, C core contract, SafeDispatchTimer on both backends; then
# that a client gets no other package and no Foundation; then every documentation snippet
# compiled as top-level code and in an async function, and a top-level client run; then
# the Benchmarks package's tests (measurement statistics, the CLI run as a process). Real
# time, but no timing thresholds. Every check runs even when one before it fails, so one
# run reports them all; the target then fails, naming each check that did.
TEST_CHECKS := \
	"layers|scripts/check-layers.sh" \
	"versions|scripts/check-versions.sh" \
	"swift test|$(SWIFT) test $(CWARNINGS)" \
	"client dependencies|SWIFT=$(SWIFT) scripts/check-client-dependencies.sh" \
	"snippets|SWIFT=$(SWIFT) scripts/check-snippets.sh" \
	"Benchmarks tests|$(SWIFT) test $(CWARNINGS) --package-path $(TOOLS)"

test: deps
	@failed=""; \
	for check in $(TEST_CHECKS); do \
		name="$${check%%|*}"; command="$${check#*|}"; \
		echo "make test: $$name: $$command"; \
		sh -c "$$command" || { echo "make test: $$name FAILED (exit $$?)"; failed="$$failed, $$name"; }; \
	done; \
	if [ -n "$$failed" ]; then echo "make test: failed: $${failed#, }"; exit 1; fi; \
	echo "make test: every check passed"

# The suite with the engine compiled out (the trait `Engine` off, as where there is no
# timerfd): the C core's own tests and the engine-only ones drop out, every other test runs
# on the GCD stand-in for the engine. Then a client with the engine off links no libevent,
# and its build warns that GCD serves.
test-engineless: deps
	$(SWIFT) test $(CWARNINGS) --disable-default-traits --scratch-path .build-engineless
	SWIFT=$(SWIFT) scripts/check-client-dependencies.sh --engineless
	SWIFT=$(SWIFT) scripts/check-engine-trait-warning.sh

# The fork tests' children start an engine, hence a thread; ThreadSanitizer refuses threads
# after a multi-threaded fork unless told otherwise.
test-tsan: deps
	TSAN_OPTIONS="die_after_fork=0 $$TSAN_OPTIONS" $(SWIFT) test --sanitize=thread --scratch-path .build-tsan

# AddressSanitizer, with LeakSanitizer, over the whole suite: the C core and the Swift
# layer above it (its unmanaged contexts, lock words and lists). XCTest is off: its empty
# pass leaks 144 bytes inside libXCTest, which LeakSanitizer would report as ours.
test-asan: deps
	LSAN_OPTIONS="suppressions=$(CURDIR)/Tests/LeakSanitizer.supp print_suppressions=0 $$LSAN_OPTIONS" \
		$(SWIFT) test --sanitize=address --scratch-path .build-asan --disable-xctest

# UndefinedBehaviorSanitizer for the C core (swift test rejects -sanitize=undefined for
# Swift targets, so it is passed to clang only).
test-ubsan-c: deps
	LD_LIBRARY_PATH=$(UBSAN_DIR) $(SWIFT) test --scratch-path .build-ubsan --disable-xctest --filter CMetronomeTests \
		-Xcc -fsanitize=undefined -Xcc -fno-sanitize-recover=undefined \
		-Xlinker -L$(UBSAN_DIR) -Xlinker -lclang_rt.ubsan_standalone-x86_64

# The C core compiles for aarch64 too (the spin hint is per architecture): a syntax check
# against Debian's cross libc headers, with libevent's from this machine.
AARCH64_ROOT := /usr/aarch64-linux-gnu
check-aarch64: deps
	@test -d $(AARCH64_ROOT)/include || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libc6-dev-arm64-cross; }
	for source in CSupport/CMetronome/*.c; do \
		clang --target=aarch64-linux-gnu --sysroot=$(AARCH64_ROOT) -isystem $(AARCH64_ROOT)/include -idirafter /usr/include \
			-fsyntax-only -Werror -Wall -Wextra -D_GNU_SOURCE -ICSupport/CMetronome/include $$source || exit 1; \
	done

jitter: deps
	$(RELEASE)
	$(CLI) jitter $(ARGS)

coalesce: deps
	$(RELEASE)
	$(CLI) coalesce $(ARGS)

scale: deps
	$(RELEASE)
	$(CLI) scale $(ARGS)

stress: deps
	$(RELEASE)
	$(CLI) stress --duration 60 $(ARGS)

stress-ci: deps
	$(RELEASE)
	$(CLI) stress --duration 20 $(ARGS)

# The example server (Benchmarks/Examples/KeepAliveServer) at a fixed request rate, in each
# build (`keepalive-server --help` lists them): scripts/bench-server.py starts it on loopback
# per build and round, drives it with the open-loop generator and prints one row per run.
# `ARGS="--rate 5000 --connections 10000"` and the like pass options.
SERVER     := Benchmarks/Examples/KeepAliveServer
SERVER_BIN  = $(SERVER)/.build/$(1)/keepalive-server
OPEN_LOOP  := $(SERVER)/.build/open-loop

# The open-loop load generator: Debian has no wrk2, and h2load's --rps times from the actual
# send, not the intended one (Benchmarks/README.md says why it is written here).
$(OPEN_LOOP): $(SERVER)/OpenLoop/open-loop.c
	@mkdir -p $(@D)
	cc -O2 -D_GNU_SOURCE -Wall -Wextra -Werror -o $@ $<

bench-server: deps $(OPEN_LOOP)
	$(SWIFT) build -c release $(CWARNINGS) --package-path $(SERVER)
	python3 scripts/bench-server.py --binary $(call SERVER_BIN,release) --load $(OPEN_LOOP) $(ARGS)

# CI: a second of load and a few dozen connections on every build, asserting behaviour only
# (every request answered, idle connections closed by their timeout and not before, no
# timer armed at exit), so a slow or noisy machine cannot fail it.
smoke-server: deps $(OPEN_LOOP)
	$(SWIFT) build $(CWARNINGS) --package-path $(SERVER)
	python3 scripts/bench-server.py --smoke --binary $(call SERVER_BIN,debug) --load $(OPEN_LOOP) $(ARGS)

bench: deps
	cd Benchmarks && $(SWIFT) package --allow-writing-to-package-directory benchmark $(ARGS)

# Draws results/jitter.png (lateness percentiles per backend) and results/coalesce.png
# (each one-shot's lateness within its leeway), measuring first where the histogram files
# of `metronome jitter --hgrm results` or `metronome coalesce --hgrm results/coalesce`
# are missing.
plot: deps
	@command -v gnuplot >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gnuplot-nox; }
	$(RELEASE)
	ls results/*.hgrm >/dev/null 2>&1 || $(CLI) jitter --hgrm results
	ls results/coalesce/*.hgrm >/dev/null 2>&1 || $(CLI) coalesce --hgrm results/coalesce
	gnuplot -e "dir='results'" scripts/plot-jitter.gp
	gnuplot -e "dir='results/coalesce'" scripts/plot-coalesce.gp

# The library's DocC archive in .build-docs/Metronome.doccarchive; any warning fails it.
# A scratch path of its own: the symbol-graph flags would otherwise rebuild .build.
DOCC       ?= $(shell command -v docc 2>/dev/null || echo /opt/swift/usr/bin/docc)
DOCS_DIR   := .build-docs

docs: deps
	$(SWIFT) build --scratch-path $(DOCS_DIR) --target Metronome \
		-Xswiftc -emit-symbol-graph -Xswiftc -emit-symbol-graph-dir -Xswiftc $(CURDIR)/$(DOCS_DIR)/symbol-graphs
	$(DOCC) convert Sources/Metronome/Metronome.docc --warnings-as-errors \
		--additional-symbol-graph-dir $(DOCS_DIR)/symbol-graphs \
		--fallback-display-name Metronome --fallback-bundle-identifier org.metronome.Metronome \
		--output-path $(DOCS_DIR)/Metronome.doccarchive

format:
	$(SWIFT) format -i -r Sources Tests Benchmarks/Sources Benchmarks/Tests

lint:
	$(SWIFT) format lint --strict -r Sources Tests Benchmarks/Sources Benchmarks/Tests
