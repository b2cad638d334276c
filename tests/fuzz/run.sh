#!/usr/bin/env bash
# run.sh - build every libFuzzer target of tests/fuzz/ and fuzz each one for a short while.
#
#   tests/fuzz/run.sh [BUILD_DIR]      (default build-fuzz)
#
# Environment:
#   FUZZ_SECONDS   seconds per target (default 10); 0 runs the seed corpus once (regression)
#   FUZZ_JOBS      targets fuzzed at the same time (default: the number of CPUs, at most 4)
#   FUZZ_TARGETS   a space-separated subset of the targets (default: all)
#   FUZZ_REQUIRED  when set, a missing clang or libFuzzer is a failure instead of a skip
#   CLANG          the compiler (default clang)
#
# Each target runs on a temporary copy of tests/fuzz/corpus/<target>/ (the committed corpus is
# never written) with tests/fuzz/dict/<target>.dict; crash, leak and timeout inputs go to
# BUILD_DIR/artifacts/<target>/, the logs to BUILD_DIR/runs/<target>/log. Exits
# non-zero when a target crashed, leaked, timed out or hit a sanitizer report.
set -u

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${1:-build-fuzz}
seconds=${FUZZ_SECONDS:-10}
clang=${CLANG:-clang}
all_targets="fuzz_request fuzz_adapters fuzz_tmpl fuzz_records fuzz_jparse fuzz_script fuzz_h1resp
             fuzz_hook_json fuzz_hook_xml"
targets=${FUZZ_TARGETS:-$all_targets}
ncpu=$(nproc 2>/dev/null || echo 2)
jobs=${FUZZ_JOBS:-$((ncpu < 4 ? ncpu : 4))}

skip() {
    echo "fuzz: skipped: $*"
    if [ -n "${FUZZ_REQUIRED:-}" ]; then
        echo "fuzz: FUZZ_REQUIRED is set, so this is a failure"
        exit 1
    fi
    exit 0
}

case "$seconds" in '' | *[!0-9]*) echo "fuzz: FUZZ_SECONDS must be a whole number" >&2; exit 2 ;; esac
command -v "$clang" >/dev/null 2>&1 || skip "$clang not found (install clang and libclang-rt-dev)"

mkdir -p "$build" || exit 1
build=$(cd "$build" && pwd)
cflags=(-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
        -fno-omit-frame-pointer -std=c11 -D_GNU_SOURCE -Wall -Wextra -I"$repo"
        $(pkg-config --cflags lua5.4))
libs=(-ljansson -lcrypto -lexpat $(pkg-config --libs lua5.4))

# libFuzzer lives in clang's runtime package, which can be missing while clang is there.
probe="$build/probe"
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)\n{ (void)d; (void)n; return 0; }\n' >"$probe.c"
if ! "$clang" -fsanitize=fuzzer,address,undefined "$probe.c" -o "$probe" >"$probe.log" 2>&1; then
    skip "$clang cannot link a libFuzzer target ($(head -n 1 "$probe.log")); install libclang-rt-dev"
fi

# ---- build: the pure sources once, then one link per target ----
sources=("$repo"/json/*.c "$repo"/core/*.c "$repo"/adapters/*.c "$repo"/script/*.c
         "$repo/store/keys.c" "$repo/net/h1resp.c" "$repo/net/netguard.c")
stamp="$build/.stamp"
flags_now="${cflags[*]} ${libs[*]} $("$clang" --version | head -n 1)"
rebuild=1
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$flags_now" ] &&
    [ -z "$(find "$repo/json" "$repo/core" "$repo/adapters" "$repo/script" \
        "$repo/store/keys.c" "$repo/store/keys.h" \
        "$repo"/net/h1resp.[ch] "$repo"/net/netguard.[ch] "$here" \
        -maxdepth 1 -name '*.[ch]' -newer "$stamp" -print -quit)" ]; then
    rebuild=0
    for t in $all_targets; do [ -x "$build/$t" ] || rebuild=1; done
fi
if [ "$rebuild" = 1 ]; then
    echo "fuzz: building in $build"
    rm -rf "$build/obj" && mkdir -p "$build/obj" || exit 1
    pids=()
    objs=()
    for src in "${sources[@]}"; do
        obj="$build/obj/$(basename "$(dirname "$src")")_$(basename "$src" .c).o"
        objs+=("$obj")
        "$clang" "${cflags[@]}" -c "$src" -o "$obj" &
        pids+=($!)
        if [ "${#pids[@]}" -ge "$ncpu" ]; then
            wait "${pids[0]}" || { echo "fuzz: compiling failed" >&2; exit 1; }
            pids=("${pids[@]:1}")
        fi
    done
    for pid in "${pids[@]}"; do wait "$pid" || { echo "fuzz: compiling failed" >&2; exit 1; }; done
    for t in $all_targets; do # all of them: the stamp speaks for every binary
        "$clang" "${cflags[@]}" "$here/$t.c" "${objs[@]}" "${libs[@]}" -o "$build/$t" ||
            { echo "fuzz: building $t failed" >&2; exit 1; }
    done
    echo "$flags_now" >"$stamp"
fi

# ---- run ----
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
runs="$build/runs"
rm -rf "$runs" && mkdir -p "$runs" || exit 1
trap 'rm -rf "$runs"/*/corpus' EXIT

run_one() {
    local t=$1 dir="$runs/$1" art="$build/artifacts/$1" args
    mkdir -p "$dir/corpus" "$art"
    cp "$here/corpus/$t"/* "$dir/corpus/" 2>/dev/null
    if [ "$seconds" = 0 ]; then
        args=(-runs=0)
    else
        args=(-max_total_time="$seconds")
    fi
    [ -f "$here/dict/$t.dict" ] && args+=(-dict="$here/dict/$t.dict")
    "$build/$t" "${args[@]}" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$art/" "$dir/corpus" >"$dir/log" 2>&1
    echo $? >"$dir/rc"
}

start=$(date +%s)
active=()
for t in $targets; do
    [ -d "$here/corpus/$t" ] || { echo "fuzz: no seed corpus for $t" >&2; exit 1; }
    run_one "$t" &
    active+=($!)
    if [ "${#active[@]}" -ge "$jobs" ]; then
        wait "${active[0]}"
        active=("${active[@]:1}")
    fi
done
for pid in "${active[@]}"; do wait "$pid"; done

status=0
for t in $targets; do
    log="$runs/$t/log"
    rc=$(cat "$runs/$t/rc" 2>/dev/null || echo 1)
    execs=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    total=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
    findings=$(grep -c '^artifact_prefix=.*Test unit written to' "$log")
    echo "$t: ${execs:-?} execs/s, ${total:-?} runs, ${cov:-cov: ?}, findings: $findings"
    if [ "$rc" != 0 ] || [ "$findings" != 0 ]; then
        status=1
        echo "---- $t failed (exit $rc); the report:"
        # From the first report line to libFuzzer's SUMMARY, then where the input was saved.
        awk '/^==[0-9]+==(ERROR|WARNING)|runtime error|INVARIANT FAILED|^ALARM|deadly signal/ { on = 1 }
             on && n++ < 80 { print } /^SUMMARY:/ { on = 0 }' "$log"
        grep -m 1 'Test unit written to' "$log"
        echo "---- (full log: $log)"
    fi
done
echo "fuzz: $(($(date +%s) - start)) s of fuzzing; $( [ $status = 0 ] && echo ok || echo FAILED )"
exit $status
