#!/usr/bin/env bash
# lens at many ranks on one machine: a lens-only job of 256 ranks and pretrain_gpt on 64 (pipeline 2 x data 32),
# each figure beside the same one at 4 ranks (bench/scale.py says what is measured). Needs the build (./build) and
# .venv (./scripts/setup-deps.sh). Figures: docs/PERFORMANCE.md; what they mean at 1,024 and 16,384 ranks:
# docs/SCALE.md. About 15 minutes on 2 cores.
#   bench/scale.sh                                   # 256 and 64 ranks
#   bench/scale.sh --ranks 16 --gpt-ranks 16 --no-baseline --check # the variant ctest runs (label scale)
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python bench/scale.py "$@"
