"""Setting telemetry up for a process, and the handle it returns (CONTRACT §2, §3, §11).

    handle = setup_telemetry(config, rank=args.rank, world_size=args.world_size,
                             resource_attributes=build_telemetry_resource_attrs(args))
    ...
    handle.shutdown()

Setup decides once, on every rank: it resolves the span-group spec (a typo fails everywhere), asks the rank
strategy whether this process exports, and starts lens's export thread only where it does. The thread is C++ and
never takes the GIL. At interpreter exit a live setup is shut down (its spans flushed), within its timeout.
"""

import atexit
import logging
import os
import threading
import uuid

from lens import _native
from lens import strategies
from lens.groups import SpanGroup, SpanRegistry
from lens.metrics import Meter
from lens.tracer import Tracer

_lock = threading.Lock()
_live = None  # the handle of the last setup, while it is not shut down
_strategy_count = 0


class TelemetryHandle:
    """What setup_telemetry returns: the tracer, the meter, and the setup's state."""

    def __init__(self, native, config, sdk_exporters=()):
        self._native = native
        self.config = config
        self.tracer = Tracer()
        self.meter = Meter()
        self._sdk_exporters = sdk_exporters  # a span_exporter / metric_reader of the OpenTelemetry SDK: shut down after

    @property
    def is_exporting(self):
        """True on a rank that exports (telemetry on, chosen by the rank strategy)."""
        return self._native.is_exporting

    @property
    def run_id(self):
        return self._native.run_id

    @property
    def rank(self):
        return self._native.rank

    @property
    def world_size(self):
        return self._native.world_size

    @property
    def resolved_span_groups(self):
        return frozenset(self._native.resolved_span_groups)

    def force_flush(self, timeout_millis=5000):
        """Exports everything ended so far; False when it could not finish in time. Releases the GIL."""
        return self._native.force_flush(int(timeout_millis))

    def shutdown(self, timeout_millis=5000, timeout_ms=None):
        """Flushes and stops, within the timeout (timeout_ms: NeMo Lens's name of it); idempotent. Releases the GIL.
        An OpenTelemetry SDK span_exporter / metric_reader given to setup is shut down after lens's last batch."""
        global _live
        with _lock:
            if _live is self:
                _live = None
        done = self._native.shutdown(int(timeout_millis if timeout_ms is None else timeout_ms))
        exporters, self._sdk_exporters = self._sdk_exporters, ()
        for exporter in exporters:
            try:
                exporter.shutdown()
            except Exception:  # noqa: BLE001: the consumer's exporter must not fail lens's shutdown
                logging.getLogger("lens").warning("lens: the exporter %r raised at shutdown", exporter, exc_info=True)
        return done

    def span_stats(self):
        return self._native.span_stats()

    def log_stats(self):
        return self._native.log_stats()

    def __repr__(self):
        return f"<TelemetryHandle exporting={self.is_exporting} run_id={self.run_id!r}>"


def _with_wandb(config, resource_attributes):
    """The config's W&B fields (set in code, or from WANDB_ENTITY / WANDB_PROJECT) under the consumer's attributes,
    as NeMo Lens puts them on the resource; the consumer's own keys win."""
    wandb = {key: value for key, value in (("wandb.entity", config.wandb_entity),
                                           ("wandb.project", config.wandb_project)) if value}
    if not wandb:
        return resource_attributes
    return {**wandb, **(resource_attributes or {})}


def setup_telemetry(config, rank=None, world_size=None, resource_attributes=None, span_exporter=None,
                    metric_reader=None, export_strategy=None, _allow_reinit=False, local_rank=None):
    """Sets this process's telemetry up and returns its TelemetryHandle.

    rank and world_size: from the launcher's environment when not given (torchrun, srun, mpirun).
    export_strategy: the name of a rank strategy, or a callable, NeMo Lens's (config, rank, world_size) -> bool or
    lens's (a lens.RankStrategyInput) -> bool, for this setup (else config.rank_strategy).
    span_exporter and metric_reader: an OpenTelemetry SDK SpanExporter and MetricReader that lens's spans and
    metrics go to, on lens's export thread, in place of the exporters OTEL_* variables choose (OTLP, console,
    file, Prometheus); anything else is refused with TypeError. They are shut down after lens's last batch.
    A second setup while an enabled one is live raises RuntimeError unless _allow_reinit, which shuts the live one
    down first."""
    global _live
    span_sink, metric_sink, sdk_objects = _sdk_sinks(span_exporter, metric_reader)
    with _lock:
        if _live is not None and _live.config.active and config.active and not _allow_reinit:
            raise RuntimeError("setup_telemetry() was already called with telemetry enabled in this process; call "
                               "shutdown() on its handle first, or pass _allow_reinit=True to replace it")
        config = config.copy()
        if config.span_group_cls is SpanGroup and SpanRegistry.namespaces():
            config.span_group_cls = SpanRegistry.span_group_cls()  # the groups the process's libraries declared
        if config.active and not config.run_id:
            config.run_id = _run_id_agreed_under_torchrun() or ""
        if export_strategy is not None:
            config.rank_strategy = _strategy_name(export_strategy)
            config.rank_strategy_source = "setup_telemetry(export_strategy=...)"
        strategies._config_at_setup.config = config  # a (config, rank, world_size) strategy is given it
        try:
            native = _native.setup(config, rank=rank, world_size=world_size, local_rank=local_rank,
                                   resource_attributes=_with_wandb(config, resource_attributes), reinit=True,
                                   span_sink=span_sink, metric_sink=metric_sink)
        finally:
            strategies._config_at_setup.config = None
        handle = TelemetryHandle(native, config, sdk_objects)
        _live = handle
        from lens import helpers
        helpers.use_other_span_groups(frozenset())  # setup's enabled set replaces any set before it, as NeMo Lens's
    _serve_opentelemetry_api()
    return handle


def _sdk_sinks(span_exporter, metric_reader):
    """(span sink, metric sink, the objects) for setup's OpenTelemetry SDK exporter and reader (None: none)."""
    if span_exporter is None and metric_reader is None:
        return None, None, ()
    if span_exporter is not None and not callable(getattr(span_exporter, "export", None)):
        raise TypeError(f"span_exporter: an OpenTelemetry SDK SpanExporter (with export(spans)), not "
                        f"{type(span_exporter).__name__}")
    if metric_reader is not None and not callable(getattr(metric_reader, "_set_collect_callback", None)):
        raise TypeError(f"metric_reader: an OpenTelemetry SDK MetricReader, not {type(metric_reader).__name__}")
    try:
        from lens import sdk_exporters
    except ImportError as error:
        raise TypeError(f"span_exporter / metric_reader need opentelemetry-sdk: {error}") from error
    span_sink = sdk_exporters.SpanKit(span_exporter) if span_exporter is not None else None
    metric_sink = sdk_exporters.MetricFeed(metric_reader).sink if metric_reader is not None else None
    return span_sink, metric_sink, tuple(x for x in (span_exporter, metric_reader) if x is not None)


def _serve_opentelemetry_api():
    """Where opentelemetry-api is importable, lens becomes its implementation (lens.otel); else nothing."""
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return
    try:
        from lens import otel
        otel.install()
    except Exception:  # noqa: BLE001: an opentelemetry-api lens cannot serve must not stop the job
        logging.getLogger("lens").warning("lens: not serving the OpenTelemetry API of this opentelemetry-api",
                                          exc_info=True)


def _run_id_agreed_under_torchrun():
    """One run id for every rank of a job under plain torchrun (no --rdzv_id), as pretrain_gpt shares rank 0's.

    There TORCHELASTIC_RUN_ID is "none" and nothing else in the environment is both the same on every rank and new
    with each job, so each rank drew its own id (CONTRACT §5). The ranks' agent hosts a store at
    MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True): the first rank to ask sets an id there and the
    others read it. None where that does not apply (SLURM's job id is the same on every rank already; an id from
    <PREFIX>_RUN_ID is in the config, which the caller checks) or the store cannot be reached within 30 s (each rank
    then draws its own, as before)."""
    env = os.environ
    if env.get("TORCHELASTIC_RUN_ID") != "none" or env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true":
        return None
    if env.get("SLURM_JOB_ID"):
        return None
    try:
        import datetime
        import torch.distributed as dist
        store = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), is_master=False,
                              timeout=datetime.timedelta(seconds=30))
        agreed = store.compare_set("lens/run_id", "", uuid.uuid4().hex[:12])
    except Exception:  # noqa: BLE001 - no torch, no store, a refused connection: the rank draws its own id
        return None
    return agreed.decode("ascii", "replace") if isinstance(agreed, bytes) else str(agreed)


def _strategy_name(strategy):
    global _strategy_count
    if isinstance(strategy, str):
        return strategy
    if not callable(strategy):
        raise TypeError("export_strategy is a strategy's name or a callable (config, rank, world_size) -> bool")
    _strategy_count += 1
    name = f"setup_telemetry_export_strategy_{_strategy_count}"
    _native.register_rank_strategy(name, strategies.as_rank_strategy(strategy), True)
    return name


def live_handle():
    """The handle of the live setup, or None."""
    return _live


def live_group_cls():
    """The SpanGroup class the live setup resolves names with (lens.groups.SpanGroup before any setup)."""
    group_cls = _live.config.span_group_cls if _live is not None else None
    if group_cls is None:
        from lens.groups import SpanGroup as group_cls
    return group_cls


def set_enabled_span_groups(groups):
    """Replaces the enabled set at run time, as NeMo Lens's does: group names (an iterable of str, any names) or a
    span-group spec (a str, resolved against the live catalogue: an unknown name is a ValueError). Returns the set
    now in force, as a frozenset of names.

    The names of the live catalogue go to lens's own set where this rank records spans (an exporting rank with
    traces on): every span site and `lens ctl` read it. Any other name (a library's own group, or any name before
    setup and on a rank that does not export) is enabled for the helpers all the same, as lens.helpers says."""
    group_cls = live_group_cls()
    order = group_cls.group_order()
    if isinstance(groups, str):
        names = group_cls.resolve(groups, "set_enabled_span_groups")
    else:
        names = frozenset(groups)
        odd = sorted(repr(name) for name in names if not isinstance(name, str))
        if odd:
            raise TypeError(f"set_enabled_span_groups: span groups are named by str, not {', '.join(odd)}")
    bits = 0
    for name in names & set(order):
        bits |= 1 << order.index(name)
    served = _native.set_enabled_span_groups(bits)
    other = names - {name for i, name in enumerate(order) if served >> i & 1}
    _native.set_outside_catalogue_enabled(bool(other - set(order)))
    from lens import helpers
    helpers.use_other_span_groups(other)
    return names


def register_rank_strategy(name, strategy, allow_override=False):
    """lens's form of a rank strategy: `strategy(info)` returns whether the rank exports; info has rank,
    world_size, local_rank, export_rank and export_sample_rate. Then <PREFIX>_RANK_STRATEGY=name selects it.
    (lens.strategies.register_export_strategy takes NeMo Lens's form too.)"""
    _native.register_rank_strategy(name, strategy, allow_override)


def register_sampling_strategy(name, factory, allow_override=False):
    """Adds a sampling strategy: `factory(input)` returns a lens sampler (lens.sampling), built from input.rank,
    input.world_size, input.export_sample_rate and input.sdk_sampler (the one OTEL_TRACES_SAMPLER asks for).
    Samplers are lens's native ones, because a sampler runs on every span, without the GIL."""
    _native.register_sampling_strategy(name, factory, allow_override)


@atexit.register
def _shutdown_at_exit():
    handle = _live
    if handle is not None:
        handle.shutdown()
