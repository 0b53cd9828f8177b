# gtrain: the README's two set-up commands.
#   make run   install missing Debian packages, build, train examples/quickstart.toml
#   make test  same set-up plus the Python test venv (scripts/venv.sh, shared by every clone on the
#              machine), then ctest with every label this machine can run
#   make run-torch2  the same quickstart built against the venv's pip LibTorch 2.x (build-torch2/)
#   make format apply .clang-format to every C++ file (ctest's Style.clang_format checks it)
BUILD ?= build
JOBS ?= $(shell nproc)
# WERROR=ON (CI sets it): warnings fail the build.
WERROR ?= OFF
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo Ninja || echo "Unix Makefiles")
# ccache must ignore the precompiled header's timestamps to reuse results, and sees the clone's own
# paths relative to it, so a fresh clone elsewhere on the machine (CI's) reuses what another built:
# nor is the working directory hashed (debug info names the build's folder, not the objects' code),
# and the cache holds both trees make test builds (Debian LibTorch, and pip's under ASan, ~8 GB).
export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1
export CCACHE_MAXSIZE := 20G

.PHONY: all deps test-deps venv configure build build-run run run-torch2 test format clean

all: build

deps:
	@scripts/install-deps.sh --no-venv

# What only the tests need (chromium for the report's browser test).
test-deps: deps
	@scripts/install-deps.sh --no-venv --test

venv: deps
	@scripts/venv.sh ensure || true

configure: deps
	@if [ ! -f $(BUILD)/CMakeCache.txt ]; then \
	  cmake -S . -B $(BUILD) -G "$$(command -v ninja >/dev/null 2>&1 && echo Ninja || echo 'Unix Makefiles')" \
	    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGTRAIN_WERROR=$(WERROR); \
	fi

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# What `make run` runs, and nothing else: the test executables and the CUDA compile check build in
# `make test` (or `make build`).
build-run: configure
	cmake --build $(BUILD) -j $(JOBS) --target gtrain gtrain-worker

run:
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory build-run && \
	./$(BUILD)/gtrain run examples/quickstart.toml --no-resume && \
	echo "make run: set-up, build and training took $$(( $$(date +%s) - start )) s"

run-torch2: venv
	scripts/build-torch2.sh build-torch2
	./build-torch2/gtrain run examples/quickstart.toml --no-resume

# When make started: run-tests.sh's time table shows the whole of make test (build and set-up too).
MAKE_START := $(shell date +%s)

test: build venv test-deps
	@GTRAIN_TEST_START=$(MAKE_START) scripts/run-tests.sh $(BUILD)

format:
	@scripts/check-format.sh --fix

clean:
	rm -rf $(BUILD) $(BUILD)-torch2 $(BUILD)-torch2-sanitize $(BUILD)-sanitize
