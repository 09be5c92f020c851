#!/usr/bin/env bash
# The declared style, kept by a machine, on every folder: every C++ file formatted as .clang-format says
# (clang-format --dry-run -Werror); the C++ sources of src/, tools/, python/native/ and trainer/ clean under
# .clang-tidy (bugprone, performance); every Python file clean under flake8 (.flake8); every C++ file including
# the standard headers it uses (scripts/check_includes.py); docs/ARCHITECTURE.md's folders and layers true of the
# tree (scripts/check_architecture.py). Fails on the first check that finds something. Needs a configured build
# directory for clang-tidy's compile commands.
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

echo "style: flake8 $(flake8 --version | grep -o '^[0-9.]*') on $(git ls-files '*.py' | wc -l) Python files"
git ls-files '*.py' | xargs flake8 || {
  echo "style: flake8 found the problems above (.flake8 says how it is configured)" >&2
  exit 1
}
./scripts/check_includes.py || {
  echo "style: ./scripts/check_includes.py --fix adds the missing includes" >&2
  exit 1
}
./scripts/check_architecture.py

# The sources built into programs and the library; the tests' own files are left to the compiler's warnings.
sources=$(git ls-files 'src/*.cc' 'tools/*.cc' 'python/native/*.cc' 'trainer/*.cc' |
  grep -v -e '_unittest\.cc$' -e '_fuzzer\.cc$' -e '_benchmark\.cc$' -e '_test\.cc$')
echo "style: clang-tidy on $(echo "$sources" | wc -l) sources of src/, tools/, python/native/ and trainer/"
# A finding is a line "<file of this tree>:<line>:<col>: warning|error: ...". clang 14 cannot parse LibTorch 1.13's
# headers as C++20 against libstdc++ 12 (a std::vector of the incomplete c10::IValue; GCC, the build's compiler,
# can): those errors, in /usr/include, are not the trainer's and are left out; everything in this tree counts.
# GCC's precompiled LibTorch headers (trainer/CMakeLists.txt) are no PCH to clang: its compile commands are the
# build's without them (every file includes what it uses, so it parses the same).
tidy_db="$build/clang-tidy"
mkdir -p "$tidy_db"
python3 - "$build/compile_commands.json" "$tidy_db/compile_commands.json" <<'PY'
import json, re, sys
commands = json.load(open(sys.argv[1]))
for c in commands:
    c["command"] = re.sub(r" -Winvalid-pch| -include \S+/cmake_pch\.hxx", "", c["command"])
json.dump(commands, open(sys.argv[2], "w"))
PY
findings=$(echo "$sources" | xargs -P "$(nproc)" -n 2 clang-tidy -p "$tidy_db" --quiet 2>&1 || true)
ours=$(grep -E "^$PWD/[^:]+:[0-9]+:[0-9]+: (warning|error): " <<<"$findings" | sort -u || true)
if [ -n "$ours" ]; then
  echo "$ours"
  echo "style: clang-tidy found the problems above (.clang-tidy says which checks)" >&2
  exit 1
fi
echo "style: clean"
