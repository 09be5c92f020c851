"""lens's native samplers, for sampling strategies registered from Python (CONTRACT §4).

    def errors_first(input):
        return lens.sampling.rank_gate(input.rank % 2 == 0, input.sdk_sampler)
    lens.register_sampling_strategy("even_ranks", errors_first)   # then <PREFIX>_SAMPLING_STRATEGY=even_ranks

A sampler decides on every span of an enabled group, on the training thread and without the GIL, so it is always
one of these (composed as you like), never a Python object.
"""

from lens import _native
from lens._native import (always_off_sampler as always_off, always_on_sampler as always_on,
                          parent_based_sampler as parent_based, rank_gate_sampler as rank_gate,
                          trace_id_ratio_sampler as trace_id_ratio)

__all__ = ["always_on", "always_off", "trace_id_ratio", "parent_based", "rank_gate", "RankAwareSampler"]


class RankAwareSampler:
    """NeMo Lens's RankAwareSampler: every span of a rank sampled, or none, by the `sampled` rule on the rank (the
    same decision as the `sampled` rank strategy and lens's `rank_aware` sampling strategy).

    For an OpenTelemetry SDK TracerProvider of your own (TracerProvider(sampler=RankAwareSampler(...))); lens's
    own pipeline is sampled natively: set <PREFIX>_SAMPLING_STRATEGY=rank_aware (or sampler_enabled=True)."""

    def __init__(self, rank, world_size, sample_rate=1.0):
        self._rank, self._world_size, self._sample_rate = rank, world_size, sample_rate
        self._sampled = sample_rate >= 1.0 or (sample_rate > 0.0 and _native.sampled_rank_score(rank) < sample_rate)

    def should_sample(self, parent_context=None, trace_id=0, name="", kind=None, attributes=None, links=None,
                      trace_state=None):
        """The OpenTelemetry SDK's SamplingResult where the SDK is installed, else a bool."""
        try:
            from opentelemetry.sdk.trace.sampling import Decision, SamplingResult
        except ImportError:
            return self._sampled
        if self._sampled:
            return SamplingResult(Decision.RECORD_AND_SAMPLE, dict(attributes) if attributes else None)
        return SamplingResult(Decision.DROP)

    def get_description(self):
        return f"RankAwareSampler(rank={self._rank}, rate={self._sample_rate})"
