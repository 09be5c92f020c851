#!/usr/bin/env bash
# The hardware check of device timing (docs/GPU.md), on a machine with a GPU and a CUDA build of PyTorch: a matmul
# loop timed by lens's device spans and by torch.cuda.Event, within 5 %. Uses the lens package built in BUILD_DIR
# (default build/; ./scripts/test.sh or cmake --build build makes it) and the python3 that has the CUDA PyTorch
# (LENS_GPU_PYTHON to choose another). Exit 0: agreed; 1: did not; 2: no lens or no PyTorch; 77: no GPU, nothing
# checked.
#
#   ./scripts/gpu_check.sh [--iterations N] [--size N] [--matmuls N]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${LENS_BUILD_DIR:-$root/build}"
if [[ ! -d "$build/python/lens" ]]; then
  echo "gpu_check: no lens package in $build/python (build it first: cmake --build $build)" >&2
  exit 2
fi
PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" exec "${LENS_GPU_PYTHON:-python3}" "$root/scripts/gpu_check.py" "$@"
