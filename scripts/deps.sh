#!/bin/sh
# Installs the Debian 12 packages botgate needs for a purpose, when some are missing:
#   deps.sh build | test | bench | deploy
# As root it runs apt-get; otherwise it prints the exact command and fails.
set -eu
purpose=${1:-build}
# Named as needed, not as pulled in: gcc only recommends libc6-dev (crt files, libc headers), and
# the installs below take no recommends, so without it cc cannot link on a fresh system.
pkgs="gcc libc6-dev make cmake pkg-config libevent-dev libcurl4-openssl-dev libhiredis-dev libjansson-dev libssl-dev libnghttp2-dev libmimalloc-dev liblua5.4-dev libexpat1-dev redis-server curl"
case "$purpose" in
  build) ;;
  test) pkgs="$pkgs libcmocka-dev python3 python3-h2 clang libclang-rt-14-dev prometheus redis-sentinel nginx-light openssl groff-base clang-format" ;;
  bench) pkgs="$pkgs python3 wrk nginx-light openssl strace valgrind" ;;
  deploy) pkgs="$pkgs python3 podman buildah runc debootstrap haproxy docker-compose podman-compose golang-github-containernetworking-plugin-dnsname yamllint systemd iproute2 nodejs" ;;
  *) echo "usage: $0 build|test|bench|deploy" >&2; exit 2 ;;
esac
# Installed packages are not yet a working toolchain: a C program must compile and link.
cc_works() {
  tmp=$(mktemp -d)
  printf '#include <stdio.h>\nint main(void) { return puts("") < 0; }\n' > "$tmp/t.c"
  if cc -o "$tmp/t" "$tmp/t.c" > "$tmp/log" 2>&1; then rm -rf "$tmp"; return 0; fi
  sed 's/^/  /' "$tmp/log" >&2
  rm -rf "$tmp"
  echo "botgate: cc cannot build a C program (above); are gcc and libc6-dev installed?" >&2
  return 1
}
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && { cc_works; exit; }
if [ "$(id -u)" -ne 0 ]; then
  echo "botgate needs these Debian packages:$missing" >&2
  echo "run:  sudo apt-get update && sudo apt-get install -y$missing" >&2
  exit 1
fi
echo "installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# Packages with services (redis-server, nginx, haproxy) must not start system-wide copies that
# hold the default ports: botgate starts its own on private sockets and free ports.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"; trap 'rm -f "$policy"' EXIT
fi
apt-get install -y -qq --no-install-recommends $missing >/dev/null
cc_works
