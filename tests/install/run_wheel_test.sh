#!/bin/bash
# The wheels of scripts/wheels.sh as a user installs them: each into a fresh venv of its own Python that
# does not see Debian's site-packages, from the wheel file with its one dependency (opentelemetry-api) taken from
# .wheelhouse (no network, no compiler), timed; then the console script `lens --help`, and a script that imports
# nemo.lens as Megatron does (no edit: the wheel's .pth hook) and exports one span to a file. The CPython 3.11 wheel
# also in a venv that sees Debian's torch, imported first: the wheel's bundled libraries beside torch's own.
#   run_wheel_test.sh SOURCE_DIR WHEEL_DIR
set -euo pipefail
source_dir=$1
wheels=$2
source "$source_dir/scripts/python_of.sh"
work=$(mktemp -d /tmp/lens-wheel-XXXXXX)
trap 'rm -rf "$work"' EXIT

check() {  # check <venv> <name> [torch-first]
  "$1/bin/python" "$source_dir/tests/install/installed_lens_check.py" "$work/out-$2" ${3:+"$3"}
}

found=0
for wheel in "$wheels"/lens-*.whl; do
  tag=$(basename "$wheel" | sed -n 's/.*-cp3\([0-9]*\)-cp3.*/\1/p')
  python=$(python_of "3.$tag")
  venv="$work/venv-3.$tag"
  "$python" -m venv "$venv"
  started=$EPOCHREALTIME
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-index --find-links "$source_dir/.wheelhouse" "$wheel"
  # Printed, not asserted (a timing; docs/BUILDING.md gives the figures): the user's "in seconds".
  echo "$(basename "$wheel"): installed in $(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $started }") s" \
    "into a fresh venv of $python"
  check "$venv" "3.$tag"
  found=$((found + 1))
done
[ "$found" -eq 3 ] || { echo "expected the wheels of CPython 3.11, 3.12 and 3.13 in $wheels, found $found"; exit 1; }

# Debian's torch (3.11) loads its own native libraries first; lens's bundled ones load beside them.
"$(python_of 3.11)" -m venv --system-site-packages "$work/venv-torch"
"$work/venv-torch/bin/pip" install --quiet --disable-pip-version-check --no-index \
  --find-links "$source_dir/.wheelhouse" "$wheels"/lens-*-cp311-*.whl
check "$work/venv-torch" torch torch-first
echo "the wheels install and work: $found Pythons, and beside torch"
