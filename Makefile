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
# ccache must ignore the precompiled header's timestamps to reuse results.
export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime

.PHONY: all deps test-deps venv configure build run run-torch2 test format clean

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

run: build
	./$(BUILD)/gtrain run examples/quickstart.toml --no-resume

run-torch2: venv
	scripts/build-torch2.sh build-torch2
	./build-torch2/gtrain run examples/quickstart.toml --no-resume

test: build venv test-deps
	@scripts/run-tests.sh $(BUILD)

format:
	@scripts/check-format.sh --fix

clean:
	rm -rf $(BUILD) $(BUILD)-torch2 $(BUILD)-torch2-sanitize $(BUILD)-sanitize
