# vt: the two commands of the README, and their parts.
#   make demo   build vt and run it on the embedded default model (CPU)
#   make test   build everything (CPU and, where nvcc exists, CUDA) and run the CPU test suite
BUILD ?= build
FUZZ_BUILD ?= build-fuzz
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 60
# The embedded default until a real small model lands: a tiny random Qwen3.5 checkpoint made by
# scripts/golden/make_goldens.py (deterministic) and committed under tests/golden/.
DEMO_MODEL ?= tests/golden/qwen3_5_dense
DEMO_PROMPT ?= 167,65,187,46,184,12,9

export PATH := $(PATH):/usr/local/cuda/bin

.PHONY: deps build demo test unit fuzz clean

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

build: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	$(BUILD)/apps/vt inspect --model $(DEMO_MODEL) | head -12
	$(BUILD)/apps/vt generate --model $(DEMO_MODEL) --prompt-ids $(DEMO_PROMPT) --max-new-tokens 32

unit: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# libFuzzer target for the safetensors parser, bounded in time.
fuzz: deps
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
	  -DCMAKE_CXX_COMPILER=clang++ -DVT_CUDA=OFF -DVT_FUZZ=ON -DVT_TESTS=ON >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_safetensors
	mkdir -p $(FUZZ_BUILD)/corpus_safetensors
	cp tests/fuzz/corpus_safetensors/* $(FUZZ_BUILD)/corpus_safetensors/
	@$(FUZZ_BUILD)/tests/fuzz_safetensors -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	  -print_final_stats=1 $(FUZZ_BUILD)/corpus_safetensors >$(FUZZ_BUILD)/fuzz_safetensors.log 2>&1; \
	  status=$$?; tail -5 $(FUZZ_BUILD)/fuzz_safetensors.log; exit $$status

# Fuzzing first, so the test runner's summary is the last thing printed.
test: fuzz unit

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD)
