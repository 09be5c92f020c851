"""The rank-aware sampler at 0.5 on rank 1 of 8, a rank its rule does not sample: nothing kept."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _rank_aware_sampler import run_on  # noqa: E402

run_on(1)
