#!/usr/bin/env bash
# The declared style, kept by a machine: every C++ file formatted as .clang-format says (clang-format --dry-run
# -Werror), and the library's sources clean under .clang-tidy (bugprone, performance). Fails on the first
# file that differs or the first finding. Needs a configured build directory for clang-tidy's compile commands.
#
#   ./scripts/style.sh build          # check (scripts/test.sh runs this)
#   ./scripts/style.sh --fix          # reformat every file in place
set -euo pipefail
cd "$(dirname "$0")/.."

cpp_files() { git ls-files '*.h' '*.cc' '*.cpp' '*.hpp'; }

if [ "${1:-}" = "--fix" ]; then
  cpp_files | xargs clang-format -i
  exit 0
fi
build=${1:?usage: style.sh BUILD_DIR | --fix}

echo "style: clang-format $(clang-format --version | grep -o '[0-9][0-9.]*' | head -1) on $(cpp_files | wc -l) files"
cpp_files | xargs clang-format --dry-run -Werror || {
  echo "style: the files above are not formatted; ./scripts/style.sh --fix formats them" >&2
  exit 1
}

library=$(git ls-files 'src/*.cc' | grep -v -e '_unittest\.cc$' -e '_fuzzer\.cc$' -e '_benchmark\.cc$' -e 'fuzz\.cc$')
echo "style: clang-tidy on $(echo "$library" | wc -l) library sources"
# "N warnings generated" counts what the header filter and the system headers hid: left out of the output.
status=0
findings=$(echo "$library" | xargs -P "$(nproc)" -n 4 clang-tidy -p "$build" --quiet 2>&1) || status=$?
grep -v 'warnings\? generated\.$' <<<"$findings" || true
if [ "$status" != 0 ]; then
  echo "style: clang-tidy found the problems above (.clang-tidy says which checks)" >&2
  exit 1
fi
echo "style: clean"
