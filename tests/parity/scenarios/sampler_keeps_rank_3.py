"""The rank-aware sampler at 0.5 on rank 3 of 8, a rank its rule samples: every span kept."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _rank_aware_sampler import run_on  # noqa: E402

run_on(3)
