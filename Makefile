# Two commands do everything on a fresh Debian 12 machine:
#   make run   installs what is missing, builds, trains the default CPU run
#   make test  installs what is missing, builds, runs the whole test suite
# Other targets: setup, build, bench, clean.

BUILD_DIR ?= build
JOBS      ?= 2
RUN_CONFIG ?= config/cpu_small.yml
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: all setup build run test bench clean

all: build

setup:
	bash scripts/setup.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS)

build: setup $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	./$(BUILD_DIR)/wgtrain --config $(RUN_CONFIG) $(ARGS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

bench: build
	./$(BUILD_DIR)/bench_checkpoint_modes $(ARGS)

clean:
	rm -rf $(BUILD_DIR)
