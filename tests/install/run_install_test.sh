#!/usr/bin/env bash
# Installs the built tree into a scratch prefix, then builds and runs an outside consumer twice: with
# find_package(lens) (shared and static) and with pkg-config.
set -euo pipefail
build_dir=$1
consumer_src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
for static in OFF ON; do
  cmake -S "$consumer_src" -B "$work/consumer-$static" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
        -Dlens_USE_STATIC_LIBS=$static >/dev/null
  cmake --build "$work/consumer-$static" >/dev/null
  LD_LIBRARY_PATH="$work/prefix/lib" "$work/consumer-$static/consumer" | grep -q "consumer: lens works" \
    || { echo "FAIL: find_package consumer (static=$static) did not run" >&2; exit 1; }
  echo "ok: find_package(lens) consumer, static=$static"
done

export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig:$work/prefix/lib/x86_64-linux-gnu/pkgconfig"
# shellcheck disable=SC2046
g++ -std=c++20 "$consumer_src/main.cc" -o "$work/pc-consumer" $(pkg-config --cflags --libs lens)
libdir=$(pkg-config --variable=libdir lens)
LD_LIBRARY_PATH="$libdir" "$work/pc-consumer" | grep -q "consumer: lens works" \
  || { echo "FAIL: pkg-config consumer did not run" >&2; exit 1; }
echo "ok: pkg-config consumer"

# The Python package, from the prefix's dist-packages, finds the installed liblens.so by itself (no
# LD_LIBRARY_PATH) and works.
site=$(find "$work/prefix" -path '*/dist-packages/lens/__init__.py' -printf '%h\n' | head -1)
[ -n "$site" ] || { echo "FAIL: cmake --install put no Python package under $work/prefix" >&2; exit 1; }
PYTHONPATH=$(dirname "$site") /usr/bin/python3 -c '
import lens
from lens.helpers import managed_span
assert lens.__file__.startswith("'"$work"'"), lens.__file__
with managed_span(lens.SpanGroup.STEP, "x") as span:
    assert span is None
print("python: lens", lens.__version__, "works")' | grep -q "python: lens .* works" \
  || { echo "FAIL: the installed Python package did not import" >&2; exit 1; }
echo "ok: the installed Python package imports"
