# hbm: the two commands users need are `make demo` and `make check`.
# CMake does the building; this file only picks the build directory and mode.
#   make                    build everything into build/
#   make check              build and run every test (ends with "N passed, N failed")
#   make check SANITIZE=1   the same under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)
#   make check SANITIZE=thread   ThreadSanitizer (build-tsan/)
#   make check SANITIZE=memory   MemorySanitizer: reads of uninitialised memory (clang; build-msan/)
#   make check VALGRIND=1   every test under valgrind's memcheck (build/; randomized
#                           tests at HBM_TEST_SCALE=0.1 unless set)
#   make demo               the main job
#   make install PREFIX=/usr/local
#   make fuzz               libFuzzer targets (clang) into build-fuzz/, ASan + UBSan;
#                           make fuzz SANITIZE=memory: under MemorySanitizer, into build-fuzz-msan/
#   make bench              the benchmarks, side by side, as JSON

SANITIZE ?= 0
VALGRIND ?= 0
PREFIX   ?= /usr/local
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
# FUZZ_BUILD: where make fuzz builds; set only for the sanitizers a fuzz build takes.
ifeq ($(SANITIZE),0)
  BUILD ?= build
  CMAKE_SAN :=
  FUZZ_BUILD := build-fuzz
else ifeq ($(SANITIZE),thread)
  BUILD ?= build-tsan
  CMAKE_SAN := -DHBM_SANITIZE=thread
else ifeq ($(SANITIZE),memory)
  BUILD ?= build-msan
  CMAKE_SAN := -DHBM_SANITIZE=memory -DCMAKE_C_COMPILER=clang
  FUZZ_BUILD := build-fuzz-msan
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

ifneq ($(VALGRIND),0)
  ifneq ($(SANITIZE),0)
    $(error VALGRIND=1 runs the plain build; leave SANITIZE out)
  endif
endif
VALGRIND_CMD := valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect

check: build
ifeq ($(VALGRIND),0)
	sh tests/run.sh $(BUILD)
else
	@command -v valgrind >/dev/null || { echo "make check VALGRIND=1: valgrind not found (Debian: apt-get install valgrind)" >&2; exit 2; }
	HBM_TEST_WRAP="$(VALGRIND_CMD)" HBM_TEST_SCALE=$${HBM_TEST_SCALE:-0.1} sh tests/run.sh $(BUILD)
endif

demo: build
	$(BUILD)/hbm demo

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

fuzz:
	$(if $(FUZZ_BUILD),,$(error make fuzz: SANITIZE=memory, or none for ASan + UBSan))
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHBM_FUZZ=ON $(CMAKE_SAN)
	cmake --build $(FUZZ_BUILD) -j $(JOBS)

bench: build
	$(BUILD)/hbm bench all --json

clean:
	rm -rf build build-asan build-tsan build-fuzz
