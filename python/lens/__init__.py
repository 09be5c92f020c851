"""lens from Python: NeMo Lens's API over lens's C++ library (CONTRACT §11).

One process has one pipeline and one thread-local context, whether a span is opened here or in C++: a
`managed_span` is the parent of a C++ span opened inside it on the same thread, and the other way round.

    import lens
    from lens.helpers import managed_span
    from lens.megatron import MegatronSpanGroup

    config = lens.NemoLensConfig.from_env(prefix="MEGATRON_OTEL", fallback_prefix="NEMO_LENS",
                                          span_group_cls=MegatronSpanGroup)
    handle = lens.setup_telemetry(config, rank=rank, world_size=world_size)
    with managed_span(MegatronSpanGroup.STEP, "megatron.train_step", **{"megatron.iteration": it}):
        ...
    handle.shutdown()

`import lens.compat.nemo_lens` makes `import nemo.lens` (and its helpers, groups, fallbacks and logging_bridge)
resolve to this package where no real NeMo Lens is installed.
"""

import importlib.util

if importlib.util.find_spec("lens._native") is not None:
    from lens._api import *  # noqa: F401,F403: the public API
    from lens._api import __all__, __version__, __package_name__  # noqa: F401
    from lens._api import __contact_names__, __contact_emails__, __homepage__  # noqa: F401
    from lens._api import __repository_url__, __download_url__  # noqa: F401
# else no native code (an interpreter lens was not built for): lens.fallbacks still imports, and every other module
# raises ImportError, so a call site's `except ImportError:` falls back to the no-ops.
