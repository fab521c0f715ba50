# The two set-up commands are `make demo` and `make test`; both install what is missing.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: deps configure build test demo bench clean

deps:
	@bash scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: build
	$(BUILD)/loom models
	$(BUILD)/loom inspect vlm-s --workload obelics
	$(BUILD)/loom inspect mllm-9b --workload laion --cluster mmscale-cluster
	$(BUILD)/loom simulate --model vlm-s --cluster pipeweaver-testbed --workload obelics --global-batch 64 \
	  --tp 4 --pp 4 --dp 4 --microbatches 16 --schedule interleaved --vpp 2 --recompute full --trace vlm-s.trace.json
	@echo "Trace written to vlm-s.trace.json: open it in https://ui.perfetto.dev"

bench: build
	$(BUILD)/loom_bench

clean:
	rm -rf $(BUILD)
