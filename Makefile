# botgate: the two commands of the quick start, and the longer runs.
#   make run    build, start a private Redis, the platform simulator and botgate with demo data
#   make test   build with AddressSanitizer + UBSan and run every test
.PHONY: all build run test test-asan bench soak install test-deploy clean

JOBS ?= $(shell nproc)
MAKEFLAGS += --no-print-directory

all: build

build:
	@scripts/deps.sh build
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBOTGATE_TESTS=OFF >/dev/null
	@cmake --build build -j$(JOBS)

run: build
	@scripts/run.sh

test:
	@scripts/deps.sh test
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DBOTGATE_SANITIZE=ON >/dev/null
	@cmake --build build-asan -j$(JOBS)
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure -j$(JOBS) $(CTEST_ARGS)

clean:
	rm -rf build build-asan build-release var
