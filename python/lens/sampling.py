"""lens's native samplers, for sampling strategies registered from Python (CONTRACT §4).

    def errors_first(input):
        return lens.sampling.rank_gate(input.rank % 2 == 0, input.sdk_sampler)
    lens.register_sampling_strategy("even_ranks", errors_first)   # then <PREFIX>_SAMPLING_STRATEGY=even_ranks

A sampler decides on every span of an enabled group, on the training thread and without the GIL, so it is always
one of these (composed as you like), never a Python object.
"""

from lens._native import (always_off_sampler as always_off, always_on_sampler as always_on,
                          parent_based_sampler as parent_based, rank_gate_sampler as rank_gate,
                          trace_id_ratio_sampler as trace_id_ratio)

__all__ = ["always_on", "always_off", "trace_id_ratio", "parent_based", "rank_gate"]
