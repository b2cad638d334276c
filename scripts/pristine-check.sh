#!/bin/bash
# The README's quick start on a fresh Debian 12, as a new user has it: a debootstrap minbase
# root with only git, make and ca-certificates, the commit under test cloned into it, then
# `make run` on a terminal (the printed curl line answers "ok":1, one Ctrl-C stops everything
# with status 0) and `make test`. Needs root (chroot, mounts) and the Debian mirror.
#   scripts/pristine-check.sh
# BOTGATE_PRISTINE_CACHE: where the base root is kept as a tarball between runs, keyed on the
# date and the apt sources (default /var/cache/botgate-pristine; empty: build it every time).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
sources=/etc/apt/sources.list.d/debian.sources
cache=${BOTGATE_PRISTINE_CACHE-/var/cache/botgate-pristine}
passed=0
failed=0

say() { echo "pristine-check $(date +%H:%M:%S): $*"; }
check() { # ok(0/1) what [detail file]
  if [ "$1" -eq 0 ]; then
    passed=$((passed + 1)); echo "PASS: $2"
  else
    failed=$((failed + 1)); echo "FAIL: $2"
    [ -n "${3:-}" ] && tail -n 40 "$3" | sed 's/^/  | /'
  fi
  return 0
}

[ "$(id -u)" -eq 0 ] || { echo "pristine-check: needs root (debootstrap, chroot, mounts)" >&2; exit 1; }
[ -r "$sources" ] || { echo "pristine-check: no $sources to take the mirror from" >&2; exit 1; }
mirror=$(awk '$1 == "URIs:" { print $2; exit }' "$sources")
commit=$(git -C "$repo" rev-parse HEAD)
work=$(mktemp -d /var/tmp/botgate-pristine.XXXXXX)
root=$work/root
mkdir "$root"

in_root() { # processes whose root directory is the chroot
  local p
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && echo "${p#/proc/}"
  done
  return 0
}
mounted() { awk -v r="$root" 'index($2, r) == 1 { print $2 }' /proc/self/mounts | sort -r; }
unmount_all() {
  local m
  for m in $(mounted); do umount -l "$m" || true; done
}
mount_all() {
  mount -t proc proc "$root/proc"
  mount -t sysfs sys "$root/sys"
  mount --bind /dev "$root/dev"
  mount --bind /dev/pts "$root/dev/pts"
}
cleanup() {
  local pids
  pids=$(in_root)
  if [ -n "$pids" ]; then
    say "ending what is left in the root: $(echo $pids)"
    kill $pids 2>/dev/null || true; sleep 1
    pids=$(in_root); [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
  fi
  unmount_all
  # Never delete through a mount that is still there (the bind of /dev above all).
  if [ -z "$(mounted)" ]; then rm -rf --one-file-system "$work"; else say "left $work (still mounted)"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
trap 'echo "pristine-check: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

run_in_root() { # command line, run as a new user would in a login shell, no stdin
  chroot "$root" /usr/bin/env -i HOME=/root TERM=xterm LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -lc "$1" < /dev/null
}

debootstrap_cmd() { # the host's debootstrap, or Debian's package unpacked here (not installed)
  if command -v debootstrap > /dev/null; then echo debootstrap; return; fi
  mkdir -p "$work/debootstrap"
  (cd "$work/debootstrap" && apt-get download -q debootstrap > /dev/null 2>&1) || return 1
  dpkg-deb -x "$work"/debootstrap/debootstrap_*.deb "$work/debootstrap/x"
  echo "env DEBOOTSTRAP_DIR=$work/debootstrap/x/usr/share/debootstrap $work/debootstrap/x/usr/sbin/debootstrap"
}

# 1. The base root: minbase plus what the README assumes (git make ca-certificates).
key=$(date +%Y-%m-%d)-$(sha256sum "$sources" | cut -c1-12)
tarball=${cache:+$cache/bookworm-minbase-$key.tar.gz}
if [ -n "$tarball" ] && [ -s "$tarball" ]; then
  say "base root from the cache ($tarball)"
  tar -C "$root" --numeric-owner -xpzf "$tarball"
else
  say "debootstrap --variant=minbase bookworm from $mirror"
  boot=$(debootstrap_cmd) || { echo "pristine-check: no debootstrap (apt-get download failed)" >&2; exit 1; }
  $boot --variant=minbase bookworm "$root" "$mirror" > "$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log" >&2; exit 1; }
  rm -f "$root/etc/apt/sources.list"
  cp "$sources" "$root/etc/apt/sources.list.d/debian.sources"
  say "installing git make ca-certificates in the root"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  mount_all
  run_in_root 'export DEBIAN_FRONTEND=noninteractive; apt-get update -qq &&
    apt-get install -y -qq git make ca-certificates' > "$work/base.log" 2>&1 ||
    { tail -n 20 "$work/base.log" >&2; exit 1; }
  run_in_root 'apt-get clean'
  unmount_all
  if [ -n "$tarball" ]; then
    mkdir -p "$cache"
    rm -f "$cache"/bookworm-minbase-*.tar.gz
    tar -C "$root" --numeric-owner -czf "$tarball.part" . && mv "$tarball.part" "$tarball"
    say "base root cached in $tarball"
  fi
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount_all

# 2. The commit under test, cloned as a user clones it.
say "cloning $commit into the root"
git clone -q --no-hardlinks "$repo" "$root/root/botgate"
git -C "$root/root/botgate" checkout -q --detach "$commit"

# 3. What ships must stand alone: every relative link of README.md and docs/ names a file of
# the clone, and nothing points above it (../).
: > "$work/links.log"
(cd "$root/root/botgate"
 for f in README.md docs/*.md; do
   grep -n '\.\./' "$f" | sed "s|^|$f: points outside: |" || true
   grep -oE '\]\([^)]*\)' "$f" | sed 's/^](//; s/)$//; s/#.*//' | grep -vE '^$|^[a-z]+:' |
     while read -r l; do [ -e "$(dirname "$f")/$l" ] || echo "$f: no such file: $l"; done || true
 done) >> "$work/links.log"
[ -s "$work/links.log" ] && ok=1 || ok=0
check $ok "README.md and docs/ link only to files in the repository" "$work/links.log"

# 4. make run on a terminal: the printed curl line, then one Ctrl-C.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
say "make run in the root (installs the build packages, builds, starts the demo)"
python3 "$root/root/botgate/tests/make_run.py" --root "$root" -- chroot "$root" /usr/bin/env -i HOME=/root \
  TERM=xterm LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  BOTGATE_LISTEN="127.0.0.1:$port" /bin/bash -lc 'cd /root/botgate && make run' \
  < /dev/null > "$work/run.log" 2>&1 || true
grep -E '^(PASS|FAIL): ' "$work/run.log" | sed 's/^/make run: /' || true
p=$(sed -n 's/^make run: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$work/run.log")
if [ -n "$p" ]; then
  passed=$((passed + ${p% *})); failed=$((failed + ${p#* }))
  [ "${p#* }" -eq 0 ] || tail -n 40 "$work/run.log" | sed 's/^/  | /'
else
  check 1 "make run: the terminal driver finished" "$work/run.log"
fi

# 5. make test: installs the test packages, builds with the sanitizers, runs every test.
say "make test in the root (installs the test packages, ASan build, every test)"
run_in_root 'cd /root/botgate && make test' > "$work/test.log" 2>&1 && ok=0 || ok=1
grep -E 'tests passed|tests failed' "$work/test.log" | tail -n 1 | sed 's/^/make test: /' || true
check $ok "make test in the root" "$work/test.log"

echo "pristine-check: $passed passed, $failed failed"
[ "$failed" -eq 0 ] || exit 1
