#!/bin/sh
# Checks (default) or applies (--fix) the tree's C formatting (.clang-format) on every C source
# and header of the product, the simulator and the tests:
#   scripts/format.sh          lists the files clang-format would change; fails if any
#   scripts/format.sh --fix    rewrites them in place
# The files are found on disk, not through git, so the check also works on an exported tree.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
fmt=${CLANG_FORMAT:-clang-format}
if ! command -v "$fmt" >/dev/null 2>&1; then
  echo "format: $fmt not found (Debian package clang-format; scripts/deps.sh test installs it)" >&2
  exit 2
fi
files=$(find adapters core ctl gateway json net script store bench tests \
          \( -name '*.c' -o -name '*.h' \) -type f | LC_ALL=C sort)
if [ "${1:-}" = "--fix" ]; then
  # shellcheck disable=SC2086
  "$fmt" -i $files
  exit 0
fi
bad=""
for f in $files; do
  "$fmt" --dry-run --Werror "$f" >/dev/null 2>&1 || bad="$bad $f"
done
if [ -n "$bad" ]; then
  echo "format: these files differ from .clang-format ($($fmt --version)):" >&2
  for f in $bad; do echo "  $f" >&2; done
  echo "fix with: scripts/format.sh --fix (or make format)" >&2
  exit 1
fi
echo "format: $(echo "$files" | wc -l) files follow .clang-format"
