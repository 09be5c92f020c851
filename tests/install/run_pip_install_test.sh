#!/bin/bash
# `pip install .` and `pip wheel .` from a checkout, as a Python user installs: a copy of the tracked
# files and of what setup unpacked beside them (so the test writes nothing into the source tree), a fresh venv that does not see Debian's site-packages,
# the build backend from .wheelhouse only (scripts/setup-deps.sh downloaded it, pinned with hashes: no network
# here), then the installed `lens`, imported as Megatron does (`nemo.lens`, no edit), records a span; the wheel
# installs the same way into a second fresh venv.
#   run_pip_install_test.sh SOURCE_DIR PYTHON
set -euo pipefail
source_dir=$1
python=$2
wheelhouse="$source_dir/.wheelhouse"
[ -d "$wheelhouse" ] || { echo "no $wheelhouse: run ./scripts/setup-deps.sh (it downloads the build backend)"; exit 1; }
work=$(mktemp -d /tmp/lens-pip-XXXXXX)
trap 'rm -rf "$work"' EXIT

mkdir "$work/checkout"
(cd "$source_dir" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work/checkout")
# What scripts/setup-deps.sh unpacks into a checkout (NVTX v3's headers, .deps/nvtx), as in the user's.
[ -d "$source_dir/.deps/nvtx" ] || { echo "no $source_dir/.deps/nvtx: run ./scripts/setup-deps.sh"; exit 1; }
mkdir "$work/checkout/.deps" && cp -r "$source_dir/.deps/nvtx" "$work/checkout/.deps/"

check() {  # check <venv's python> <name>: tests/install/installed_lens_check.py
  "$1" "$source_dir/tests/install/installed_lens_check.py" "$work/out-$2"
}

"$python" -m venv "$work/venv"
(cd "$work/checkout" && "$work/venv/bin/pip" install --quiet --disable-pip-version-check --no-index \
  --find-links "$wheelhouse" .)
check "$work/venv/bin/python" install

(cd "$work/checkout" && "$work/venv/bin/pip" wheel --quiet --disable-pip-version-check --no-index \
  --find-links "$wheelhouse" --no-deps -w "$work/dist" .)
"$python" -m venv "$work/venv2"
"$work/venv2/bin/pip" install --quiet --disable-pip-version-check --no-index --find-links "$wheelhouse" \
  "$work"/dist/lens-*.whl
check "$work/venv2/bin/python" wheel
echo "pip install . and the wheel: both work"
