#!/bin/sh
# make soak: the normal build, then tests/integration/soak.py: SOAK_SECONDS (default 600) of
# mixed traffic from SOAK_THREADS (default 8) client threads with faults every minute (Redis
# killed and restarted, platform latency above the deadline, idle connections), a summary at
# the end; the exit status is 1 when a check fails (lost answers, crashes, RSS growing...).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/deps.sh build
command -v python3 >/dev/null || { echo "make soak needs python3" >&2; exit 1; }
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBOTGATE_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)"
BOTGATE_BIN_DIR="$root/build/bin" exec python3 tests/integration/soak.py
