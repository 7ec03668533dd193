# hbm: the two commands users need are `make demo` and `make check`.
# CMake does the building; this file only picks the build directory and mode.
#   make                    build everything into build/
#   make check              build and run every test (ends with "N passed, N failed")
#   make check SANITIZE=1   the same under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)
#   make check SANITIZE=thread   ThreadSanitizer (build-tsan/)
#   make demo               the main job
#   make install PREFIX=/usr/local
#   make fuzz               libFuzzer targets (clang) into build-fuzz/
#   make bench              the benchmarks, side by side, as JSON

SANITIZE ?= 0
PREFIX   ?= /usr/local
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
ifeq ($(SANITIZE),0)
  BUILD ?= build
  CMAKE_SAN :=
else ifeq ($(SANITIZE),thread)
  BUILD ?= build-tsan
  CMAKE_SAN := -DHBM_SANITIZE=thread
else
  BUILD ?= build-asan
  CMAKE_SAN := -DHBM_SANITIZE=address
endif

.PHONY: all build check demo install fuzz bench clean
all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_SAN) -DCMAKE_INSTALL_PREFIX=$(PREFIX)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

check: build
	sh tests/run.sh $(BUILD)

demo: build
	$(BUILD)/hbm demo

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

fuzz:
	CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHBM_FUZZ=ON
	cmake --build build-fuzz -j $(JOBS)

bench: build
	$(BUILD)/hbm bench all --json

clean:
	rm -rf build build-asan build-tsan build-fuzz
