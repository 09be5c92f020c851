"""Which ranks export (CONTRACT §3), with NeMo Lens's `nemo.lens.strategies` API.

    def even_ranks(config, rank, world_size):       # NeMo Lens's form
        return rank % 2 == 0
    register_export_strategy("even_ranks", even_ranks)   # then NEMO_LENS_EXPORT_STRATEGY=even_ranks

A strategy is called once, at setup. Its form is NeMo Lens's `(config, rank, world_size) -> bool`; a callable of
one argument is lens's own form, given a lens.RankStrategyInput (rank, world_size, local_rank, export_rank,
export_sample_rate). The built-in strategies are lens's C++ ones, so a strategy name means the same in C++ and
Python processes of one job.
"""

import inspect
import threading
from typing import Callable

from lens import _native

ExportStrategy = Callable[["NemoLensConfig", int, int], bool]  # noqa: F821: NeMo Lens's type alias

BUILTIN_STRATEGIES = frozenset({"all_ranks", "single_rank", "sampled", "first_rank_per_node"})

_config_at_setup = threading.local()  # the config a setup is running with, for the strategies it calls


def register_export_strategy(name, strategy, *, allow_override=False):
    """Adds a strategy under `name`. ValueError: an empty name, or a name already registered (a built-in too)
    without allow_override=True. TypeError: a strategy that is not callable."""
    if not isinstance(name, str) or not name:
        raise ValueError("Strategy name must be a non-empty string.")
    if not callable(strategy):
        raise TypeError(f"export strategy {name!r}: a callable (config, rank, world_size) -> bool, not "
                        f"{type(strategy).__name__}")
    if name in registered_strategies() and not allow_override:
        raise ValueError(f"Strategy {name!r} is already registered. Pass allow_override=True to replace it.")
    _native.register_rank_strategy(name, as_rank_strategy(strategy), True)


def unregister_export_strategy(name):
    """Removes a registered strategy. ValueError: a built-in or unknown name."""
    if name in BUILTIN_STRATEGIES:
        raise ValueError(f"Cannot unregister built-in strategy {name!r}.")
    if name not in registered_strategies():
        raise ValueError(f"Strategy {name!r} is not registered.")
    _native.unregister_rank_strategy(name)


def registered_strategies():
    """Every registered name, built-ins included, sorted."""
    return sorted(_native.rank_strategy_names())


def get_export_strategy(name):
    """The strategy `name` as a callable (config, rank, world_size) -> bool. ValueError: an unknown name."""
    if name not in registered_strategies():
        raise ValueError(f"Unknown export_strategy {name!r}. Registered strategies: {registered_strategies()}.")

    def strategy(config, rank, world_size):
        return _native.rank_exports(name, rank, world_size, int(config.export_rank), float(config.export_sample_rate))

    strategy.__name__ = name
    return strategy


def as_rank_strategy(strategy):
    """The native rank strategy (one RankStrategyInput argument) that runs `strategy`, in either form."""
    if _takes_one_argument(strategy):
        return strategy

    def three_argument_form(info):
        config = getattr(_config_at_setup, "config", None)
        if config is None:
            from lens.config import NemoLensConfig
            config = NemoLensConfig(export_rank=info.export_rank, export_sample_rate=info.export_sample_rate)
        return strategy(config, info.rank, info.world_size)

    return three_argument_form


def _takes_one_argument(strategy):
    try:
        parameters = inspect.signature(strategy).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: NeMo Lens's form
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = any(p.kind == p.VAR_POSITIONAL for p in parameters)
    return len(positional) == 1 and not variadic


__all__ = ["BUILTIN_STRATEGIES", "ExportStrategy", "get_export_strategy", "register_export_strategy",
           "registered_strategies", "unregister_export_strategy"]
