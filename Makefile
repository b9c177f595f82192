# nextn — thin wrapper over CMake. `make demo` and `make test` are the two commands of the README.
#   make                 build (Release) into build/
#   make test            build and run every test through ctest
#   make test SANITIZE=address,undefined   the same in build-asan/ with sanitizers (unit tests and
#                                          the model server's scripts, incl. the 20 x 20 s load test)
#   make demo            MTP speculation on the bundled model and on its inflated copy (built once
#                        into $(BUILD)/, ~700 MB), each off / fixed k / adaptive
#   make bench           kernel and model benchmarks
#   make fuzz            build the libFuzzer targets with clang into build-fuzz/ (FUZZ_SECONDS=N runs each)
JOBS      ?= $(shell nproc 2>/dev/null || echo 2)
SANITIZE  ?=
BUILD     ?= $(if $(SANITIZE),build-asan,build)
CMAKE_ARGS ?=
NEXTN      = $(BUILD)/nextn
DEMO_MODEL ?= models/tiny-qwen35-mtp-q8_0.gguf
FUZZ_SECONDS ?= 0
CTEST_ARGS ?=

.PHONY: all deps configure build test demo bench fuzz clean

all: build

deps:
	@bash scripts/deps.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(if $(SANITIZE),Debug,Release) \
	  $(if $(SANITIZE),-DNX_SANITIZE=$(SANITIZE) -DCMAKE_C_FLAGS=-O1,) $(CMAKE_ARGS) >/dev/null

configure: $(BUILD)/CMakeCache.txt

build: deps configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(if $(SANITIZE),-L 'unit|sanitize',) $(CTEST_ARGS)

demo: build
	$(NEXTN) demo -m $(DEMO_MODEL) --cache-dir $(BUILD)

bench: build
	$(NEXTN) bench-kernels

fuzz: deps
	cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DNX_FUZZ=ON -DNX_WERROR=OFF \
	  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="-O1 -fsanitize=fuzzer-no-link,address,undefined" >/dev/null
	cmake --build build-fuzz -j $(JOBS) --target fuzzers
	@if [ "$(FUZZ_SECONDS)" != 0 ]; then for f in build-fuzz/fuzz_*; do \
	  mkdir -p fuzz-out/$$(basename $$f); \
	  $$f -max_total_time=$(FUZZ_SECONDS) fuzz-out/$$(basename $$f) fuzz/corpus/$$(basename $$f) || exit 1; done; fi

clean:
	rm -rf build build-asan build-fuzz
