# Thin wrapper over CMake. Every target installs what it needs first (scripts/install_deps.sh is
# idempotent and silent when nothing is missing), then configures and builds in Release.
BUILD ?= build
JOBS ?= 2
CMAKE_FLAGS ?=

.PHONY: all deps build install data data-paper test test-sanitize fuzz demo demo-quick paper-quick paper-cpu paper-plan bench clean

all: build

deps:
	@bash scripts/install_deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# fca into $(PREFIX)/bin (default /usr/local/bin, on PATH), where fca_adapter.audit also finds it.
PREFIX ?= /usr/local
install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

data: deps
	@bash scripts/fetch_corpus.sh

# The paper reproduction's second corpus (docs/paper.md), besides the default one.
data-paper: data
	@bash scripts/fetch_corpus.sh sotu

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
	@# Warnings are the ordinary build's business: g++ 12 reports false maybe-uninitialized warnings
	@# in std::regex under ASan's instrumentation, so this build does not make them errors.
	@# -O1 -g1 (line tables: reports still name file and line): the instrumented build of every file
	@# takes half the time of -O2 -g (measured on report_inputs.cpp: 42 s against 100 s), which is
	@# most of this target's time in CI; AddressSanitizer's documentation recommends -O1.
	@cmake -S . -B $(SANITIZE_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
	  -DFCA_BUILD_BENCH=OFF -DFCA_SANITIZE=ON -DFCA_WERROR=OFF >/dev/null
	@cmake --build $(SANITIZE_BUILD) -j $(JOBS)
	@cd $(SANITIZE_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j 1

# libFuzzer targets (fuzz/), built with clang under ASan and UBSan, each run for FUZZ_SECONDS
# from seeds made of the test data; findings land in $(FUZZ_BUILD)/findings/. See docs/building.md.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
fuzz: deps
	@FCA_WITH_FUZZ=1 FCA_WITH_TORCH=1 bash scripts/install_deps.sh
	@CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFCA_FUZZ=ON -DFCA_BUILD_TESTS=OFF \
	  -DFCA_BUILD_BENCH=OFF -DFCA_WERROR=OFF >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS)
	@bash scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

demo: build data
	@bash scripts/demo.sh $(BUILD) configs/demo.json

demo-quick: build data
	@bash scripts/demo.sh $(BUILD) configs/demo-quick.json

# The reproduction of the paper (docs/paper.md): fca paper on both corpora, then a check that the
# page prints every figure beside the paper's value. paper-quick: tiny models (CI); paper-cpu: the
# committed CPU-scale run (under 2 hours on 2 cores, resumable); paper-plan: the paper's shapes,
# planned only.
# ENGINE=torch: the gated and MUDD variants trained and audited by fca_torch (docs/torch-engine.md),
# into <out>-torch; FCA_GPUS=N runs the trainer under torchrun with N processes.
ENGINE ?= native
paper-quick: build data-paper
	@bash scripts/paper.sh $(BUILD) configs/paper-quick.json $(ENGINE)

paper-cpu: build data-paper
	@bash scripts/paper.sh $(BUILD) configs/paper-cpu.json $(ENGINE)

paper-plan: build
	@$(BUILD)/fca paper --config configs/paper-76m.json --plan

bench: build data
	@FCA_WITH_TORCH=1 bash scripts/install_deps.sh
	@bash scripts/bench.sh $(BUILD)

clean:
	rm -rf $(BUILD)
