# The two set-up commands are `make demo` and `make test`; both install what is missing.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: deps configure build test test-asan test-tsan cuda-build fuzz demo demo-train bench screenshot format clean

deps:
	@bash scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The sanitizer pass (docs/testing.md): every test built with ASan + UBSan
# (float-cast-overflow included) in its own folder; `.ci/run` runs it after
# `make test`. Leaks are reported by LeakSanitizer; libtorch's own one-time
# allocations are suppressed by name in scripts/lsan.supp. ASAN_SKIP leaves out
# the runtime tests listed in scripts/asan-skip.txt, each naming the kept test
# that runs its code under the sanitizers: repetitions over more layouts,
# strategies and failures, which kept `.ci/run` past its 90 minutes.
ASAN_BUILD ?= build-asan
ASAN_SKIP ?= ^($(shell sed -e 's/\#.*//' -e 's/ //g' -e '/^$$/d' scripts/asan-skip.txt | paste -sd'|'))$$
test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" -DLOOM_SANITIZE=ON
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target loom loom_tests loom_runtime_tests loom_cuda_tests
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/scripts/lsan.supp \
	  ctest --output-on-failure -j $(JOBS) -E '$(ASAN_SKIP)'

# The thread pass (docs/testing.md): the tests that plan strategies or search
# on several threads (`loom plan --jobs`, PipeWeaver's parallel MCTS), built
# with ThreadSanitizer in their own folder; any race report fails it.
TSAN_BUILD ?= build-tsan
TSAN_TESTS ?= Comparison.*:PipeweaverRanking.*
test-tsan: deps
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" -DLOOM_SANITIZE_THREAD=ON -DLOOM_PYTHON=OFF
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target loom_tests
	cd $(TSAN_BUILD) && TSAN_OPTIONS=halt_on_error=1 ./loom_tests --gtest_filter='$(TSAN_TESTS)'

# The CUDA build (docs/dependencies.md): the runtime against PyTorch's CUDA
# libtorch, NCCL and this machine's CUDA toolkit, in its own folder; no GPU is
# needed to compile, link and start it. `.ci/run` builds it, checks that
# `loom --version` says CUDA, and runs the tests that need a GPU, which skip
# with a message where there is none. It links the CPU build's libloom.a
# (built first; only runtime/ differs). On a GPU machine without a package
# registry, scripts/build-cuda.sh builds the whole of it.
CUDA_BUILD ?= build-cuda
cuda-build: build
	cmake -S . -B $(CUDA_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=ON -DLOOM_PYTHON=OFF \
	  -DLOOM_LIB_FROM=$(abspath $(BUILD))
	cmake --build $(CUDA_BUILD) -j $(JOBS) --target loom loom_cuda_tests
	$(CUDA_BUILD)/loom --version | grep -q 'with CUDA' || { $(CUDA_BUILD)/loom --version; echo "cuda-build: loom --version does not say CUDA" >&2; exit 1; }
	cd $(CUDA_BUILD) && ctest --output-on-failure -R '^CudaBuild\.'

# The libFuzzer harnesses (fuzz/, clang): each runs FUZZ_SECONDS on its seed
# corpus (fuzz/corpus/, from examples/ and the zoo); a crash, a hang past
# FUZZ_TIMEOUT seconds or a sanitizer report fails the target and leaves the
# input in $(FUZZ_BUILD)/artifacts/.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TIMEOUT ?= 10
fuzz:
	@bash scripts/install-deps.sh --with-fuzz
	CC=clang-14 CXX=clang++-14 cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" -DLOOM_FUZZ=ON
	cmake --build $(FUZZ_BUILD) -j $(JOBS)
	bash scripts/run-fuzzers.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TIMEOUT)

# The main job on the built-in example: vlm-s (ViT-5B + Llama3-8B, PipeWeaver's
# VLM-S) on 16 H800 GPUs (2 nodes of 8) with OBELICS interleaved image-text data.
demo: build
	$(BUILD)/loom inspect vlm-s --workload obelics
	$(BUILD)/loom plan --model vlm-s --cluster h800:2x8 --workload obelics --global-batch 32 \
	  --strategy all --report report.html --json plans.json --trace best.trace.json
	@echo "Open report.html in a browser; best.trace.json in https://ui.perfetto.dev"
	@echo "--- The runtime: a ViT-heavy VLM planned by every strategy with this machine's profile, each plan run"
	$(BUILD)/loom profile --model examples/runtime/vit-heavy-vlm.yaml --concurrent 2 --out $(BUILD)/this-machine.yaml
	$(BUILD)/loom plan --model examples/runtime/vit-heavy-vlm.yaml --cluster examples/runtime/two-small-gpus.yaml \
	  --workload examples/runtime/image-heavy.yaml --profile $(BUILD)/this-machine.yaml --json runtime-plans.json \
	  --run --run-steps 4
	$(BUILD)/loom run --model examples/runtime/vit-heavy-vlm.yaml --cluster examples/runtime/two-small-gpus.yaml \
	  --workload examples/runtime/image-heavy.yaml --plan runtime-plans.json --steps 4 \
	  --compare --profile $(BUILD)/this-machine.yaml --timeline runtime.svg
	@echo "runtime.svg: the best plan's last step as predicted (top) and as it ran (bottom)"
	@echo "--- Oobleck on the runtime: three one-GPU nodes, f = 1; node 1 dies in step 1 and comes back before step 3"
	$(BUILD)/loom plan --model examples/runtime/vit-heavy-vlm.yaml --cluster h100:3x1 \
	  --workload examples/runtime/image-heavy.yaml --precision fp32 --strategy oobleck --fault-tolerance 1 \
	  --iterations 1 --json oobleck-plan.json
	$(BUILD)/loom run --model examples/runtime/vit-heavy-vlm.yaml --cluster h100:3x1 \
	  --workload examples/runtime/image-heavy.yaml --plan oobleck-plan.json --fault-tolerance 1 --steps 4 \
	  --kill 1:1:3 --rejoin 1:3

	@echo "--- Training a real model: a tiny LLaVA (CLIP tower + Llama, made by transformers) learns to caption shapes"
	$(MAKE) --no-print-directory demo-train

# `make demo`'s training part (docs/runtime.md, README "Train on your data"):
# data in WebDataset shards prepared with the model's own tokenizer and image
# processor, 500 steps under DP 2 with checkpoints, "stopped", resumed under TP 2
# for the rest of the schedule, saved for transformers, which captions unseen images.
PYTHON ?= $(shell $(LOOM_PYTHON_EXE) -c 'import sys; print(sys.executable)' 2>/dev/null || echo python3)
LOOM_PYTHON_EXE ?= python3
TRAIN ?= demo-train
demo-train: build
	rm -rf $(TRAIN)
	$(PYTHON) python/prepare/make_tiny_llava.py $(TRAIN)/model
	$(PYTHON) python/prepare/make_shapes_dataset.py $(TRAIN)/shapes --count 600 --format wds
	$(BUILD)/loom prepare --model $(TRAIN)/model --input '$(TRAIN)/shapes/shapes-{000000..000005}.tar' \
	  --out $(TRAIN)/data --template caption
	$(BUILD)/loom run --model $(TRAIN)/model --data $(TRAIN)/data/data.jsonl --cluster h100:1x2 --dp 2 \
	  --global-batch 32 --precision fp32 --lr 2e-3 --lr-schedule cosine --warmup-steps 50 --decay-steps 1000 \
	  --steps 500 --checkpoint-dir $(TRAIN)/checkpoints --checkpoint-every 250 --metrics $(TRAIN)/first.jsonl | tail -4
	@echo "--- stopped after step 500; resumed under another plan (TP 2) from $(TRAIN)/checkpoints"
	$(BUILD)/loom run --model $(TRAIN)/model --data $(TRAIN)/data/data.jsonl --cluster h100:1x2 --tp 2 \
	  --global-batch 32 --precision fp32 --lr 2e-3 --lr-schedule cosine --warmup-steps 50 --decay-steps 1000 \
	  --steps 1000 --resume $(TRAIN)/checkpoints --checkpoint-dir $(TRAIN)/checkpoints \
	  --save $(TRAIN)/trained --metrics $(TRAIN)/second.jsonl --report training.html | tail -4
	$(PYTHON) python/prepare/caption_check.py $(TRAIN)/trained 2>/dev/null
	@echo "training.html: the whole run's loss, gradient norm, learning rate and tokens/s (both parts, from the checkpoint folder's record)"

# Renders report.html in headless Chromium (installs it if missing).
screenshot: demo
	bash scripts/screenshot-report.sh report.html docs/img/report.png

bench: build
	$(BUILD)/loom_bench

# Formats every C++ file in place with .clang-format (Debian's
# clang-format-14, installed if missing); CI does not run it.
format:
	@bash scripts/install-deps.sh --with-format
	git ls-files 'src/*.cpp' 'src/*.h' 'tests/*.cpp' 'tests/*.h' 'bench/*.cpp' 'bench/*.h' 'fuzz/*.cpp' 'python/*.cpp' \
	  | xargs clang-format-14 -i

clean:
	rm -rf $(BUILD)
