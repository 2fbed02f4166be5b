# Thin wrapper over CMake. Every target installs what it needs first (scripts/install_deps.sh is
# idempotent and silent when nothing is missing), then configures and builds in Release.
BUILD ?= build
JOBS ?= 2
CMAKE_FLAGS ?=

.PHONY: all deps build data test test-sanitize demo demo-quick bench clean

all: build

deps:
	@bash scripts/install_deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

data: deps
	@bash scripts/fetch_corpus.sh

# The test suite needs no corpus: tests make their own small data. The external-adapter tests run
# the PyTorch examples and the report test screenshots the report, so it installs Debian's
# python3-torch and chromium.
test: build
	@FCA_WITH_TORCH=1 FCA_WITH_CHROMIUM=1 bash scripts/install_deps.sh
	@cd $(BUILD) && ctest --output-on-failure -j 1

# The whole suite under AddressSanitizer and UndefinedBehaviorSanitizer (any report fails the run),
# in its own build folder; no benchmarks. See docs/building.md.
SANITIZE_BUILD ?= build-sanitize
test-sanitize: deps
	@FCA_WITH_TORCH=1 FCA_WITH_CHROMIUM=1 bash scripts/install_deps.sh
	@cmake -S . -B $(SANITIZE_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFCA_BUILD_BENCH=OFF -DFCA_SANITIZE=ON >/dev/null
	@cmake --build $(SANITIZE_BUILD) -j $(JOBS)
	@cd $(SANITIZE_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j 1

demo: build data
	@bash scripts/demo.sh $(BUILD) configs/demo.json

demo-quick: build data
	@bash scripts/demo.sh $(BUILD) configs/demo-quick.json

bench: build data
	@FCA_WITH_TORCH=1 bash scripts/install_deps.sh
	@bash scripts/bench.sh $(BUILD)

clean:
	rm -rf $(BUILD)
