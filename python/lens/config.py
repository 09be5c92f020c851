"""Configuration from the environment (CONTRACT §2), read by lens's C++ library.

`NemoLensConfig.from_env(prefix, fallback_prefix, span_group_cls)` reads each lens key as <PREFIX>_<KEY>, then
<FALLBACK>_<KEY>, and the OpenTelemetry SDK variables (OTEL_*): the same values and the same error messages as
`lens::Config::from_env` in C++, because it is that function. Fields can be set afterwards, as Megatron-LM does
with its --otel-* flags::

    config = NemoLensConfig.from_env(prefix="MEGATRON_OTEL", fallback_prefix="NEMO_LENS",
                                     span_group_cls=MegatronSpanGroup)
    if args.otel_enabled:
        config.enabled = True
"""

import os

from lens import _native
from lens.groups import SpanGroup

DEFAULT_SERVICE_NAME = "nemo"  # NeMo Lens's, where OTEL_SERVICE_NAME is unset (Megatron sets "megatron-lm")
RANK_AWARE = "rank_aware"  # the sampling strategy NeMo Lens's sampler_enabled turns on


class NemoLensConfig(_native.Config):
    """The settings of one process's telemetry; the fields of CONTRACT §2 as attributes."""

    def __init__(self, **fields):
        super().__init__()
        self.service_name = DEFAULT_SERVICE_NAME
        self.span_group_cls = SpanGroup
        self.wandb_entity = ""   # NeMo Lens's W&B fields (WANDB_ENTITY, WANDB_PROJECT): kept for the consumer
        self.wandb_project = ""
        for name, value in fields.items():
            if name.startswith("_") or not hasattr(self, name):
                raise TypeError(f"NemoLensConfig has no field {name!r}")
            setattr(self, name, value)
        if not 0.0 <= self.export_sample_rate <= 1.0:  # NeMo Lens checks at construction (from_env: at reading)
            raise _native.ConfigError(f"export_sample_rate must be in [0.0, 1.0], got {self.export_sample_rate}")

    # NeMo Lens's field names beside lens's own (CONTRACT §2 names both): the same settings, not copies.
    @property
    def export_strategy(self):
        """NeMo Lens's name of rank_strategy: which ranks export."""
        return self.rank_strategy

    @export_strategy.setter
    def export_strategy(self, name):
        self.rank_strategy = name

    @property
    def sampler_enabled(self):
        """NeMo Lens's switch of its RankAwareSampler: lens's sampling_strategy `rank_aware`."""
        return self.sampling_strategy.lower() == RANK_AWARE  # resolved at setup: as written, or lower-cased

    @sampler_enabled.setter
    def sampler_enabled(self, on):
        if on:
            self.sampling_strategy = RANK_AWARE
        elif self.sampling_strategy.lower() == RANK_AWARE:
            self.sampling_strategy = ""

    @property
    def user(self):
        """NeMo Lens's name of user_id (<PREFIX>_USER_ID)."""
        return self.user_id

    @user.setter
    def user(self, value):
        self.user_id = value

    @property
    def span_group_cls(self):
        """The SpanGroup class whose catalogue span-group specs resolve against."""
        return self.__dict__["_span_group_cls"]

    @span_group_cls.setter
    def span_group_cls(self, cls):
        if not (isinstance(cls, type) and issubclass(cls, SpanGroup)):
            raise TypeError("span_group_cls must be SpanGroup or a subclass of it")
        self._use_catalogue(*cls._catalogue())
        self.__dict__["_span_group_cls"] = cls

    @classmethod
    def from_env(cls, prefix="NEMO_LENS", fallback_prefix=None, span_group_cls=None,
                 default_service_name=DEFAULT_SERVICE_NAME):
        """Reads every key from the process environment; a bad value raises lens.ConfigError (a ValueError)."""
        group_cls = span_group_cls or SpanGroup
        config = cls()
        config.span_group_cls = group_cls
        config._load_env(prefix, fallback_prefix or "", default_service_name, *group_cls._catalogue())
        config.wandb_entity = os.environ.get("WANDB_ENTITY", "")
        config.wandb_project = os.environ.get("WANDB_PROJECT", "")
        return config

    @property
    def resolved_span_groups(self):
        """The groups `span_groups` names, as a frozenset (raises lens.ConfigError on an unknown name)."""
        return self.span_group_cls.resolve(self.span_groups, self.span_groups_source)

    def copy(self):
        twin = type(self)()
        self._copy(twin)
        twin.__dict__["_span_group_cls"] = self.span_group_cls
        twin.wandb_entity, twin.wandb_project = self.wandb_entity, self.wandb_project
        return twin

    def __repr__(self):
        return f"NemoLensConfig({self.summary()})"


Config = NemoLensConfig
