"""Today's Megatron-LM telemetry call shapes, performed the way Megatron performs them, written for lens's
tests: the imports in their try/except form, `_set_telemetry`, the startup spans back-dated from launch timestamps,
the interval blocks re-rooted with links, the step and its trace_fn sub-spans, the pipeline's linked span ended
without `with`, the exposed checkpoint save with the async request's call_idx on the current span, evaluation's
attribute on the current span, training_metrics' meter, the SIGTERM path's provider flush, and shutdown.

    megatron_shapes.py OUT_JSON   (with lens and opentelemetry-api importable, or neither: the no-op path)

Prints nothing; writes what it saw to OUT_JSON: whether telemetry was live, and the ids of the spans it kept."""

import json
import sys
import time

try:  # lens on PYTHONPATH (a build tree): installed, its .pth hook does this; under the real NeMo Lens: no lens
    import lens.compat.nemo_lens  # noqa: F401: where no real NeMo Lens is installed, nemo.lens is lens
except ImportError:
    pass

try:  # megatron/training/training.py's form
    from nemo.lens.state import is_span_group_enabled as _otel_sg_enabled
    from nemo.lens.helpers import managed_span as _otel_managed_span
    from nemo.lens.helpers import safe_set_span_attributes as _otel_safe_set_attrs
    from nemo.lens.helpers import trace_fn as _otel_trace_fn
    from nemo.lens.distributed import create_linked_span as _otel_create_linked_span
    from nemo.lens.state import get_pp_trace_carrier as _otel_get_pp_carrier, set_pp_trace_carrier
except ImportError:  # Megatron's own no-op stubs, in their place
    def _otel_sg_enabled(group):
        return False

    class _NoSpan:
        def __enter__(self):
            return None

        def __exit__(self, *exc):
            return False

    def _otel_managed_span(group, name, tracer=None, **attributes):
        return _NoSpan()

    def _otel_safe_set_attrs(span, attributes):
        return None

    def _otel_trace_fn(group, name, tracer=None):
        return lambda function: function

    _otel_create_linked_span = None

    def _otel_get_pp_carrier():
        return None

try:  # megatron/core/telemetry/training_metrics.py's form
    from opentelemetry import metrics as _otel_metrics
except ImportError:
    _otel_metrics = None

_GLOBAL_TELEMETRY_HANDLE = None
_TRAINING_INSTRUMENTS = __import__("weakref").WeakKeyDictionary()


def get_telemetry():
    return _GLOBAL_TELEMETRY_HANDLE


def _megatron_span_group():
    """megatron/core/telemetry/span_groups.py's shape: Megatron's own subclass of NeMo Lens's SpanGroup (the names
    and presets of lens's Megatron catalogue)."""
    from nemo.lens.groups import SpanGroup

    class MegatronSpanGroup(SpanGroup):
        MICROBATCH, LAYER, COMMUNICATION = "microbatch", "layer", "communication"
        ACTIVATION_OFFLOAD, DATA_LOADING = "activation_offload", "data_loading"
        FIRST_ITERATION, TRACE_REGION, INFERENCE = "first_iteration", "trace_region", "inference"
        ALL_GROUPS = SpanGroup.ALL_GROUPS | frozenset([MICROBATCH, LAYER, COMMUNICATION, ACTIVATION_OFFLOAD,
                                                       DATA_LOADING, FIRST_ITERATION, TRACE_REGION, INFERENCE])
        _PRODUCTION = frozenset([SpanGroup.JOB, SpanGroup.CHECKPOINT, SpanGroup.EVALUATE, FIRST_ITERATION, INFERENCE])
        _PRESETS = {"default": _PRODUCTION,
                    "per_step": _PRODUCTION | frozenset([SpanGroup.MODEL_INIT, SpanGroup.LOAD_CHECKPOINT,
                                                         SpanGroup.STEP, SpanGroup.FORWARD_BACKWARD,
                                                         SpanGroup.OPTIMIZER, COMMUNICATION, DATA_LOADING]),
                    "all": ALL_GROUPS}

    return MegatronSpanGroup


def _set_telemetry(rank, world_size):
    """global_vars._set_telemetry's shape."""
    global _GLOBAL_TELEMETRY_HANDLE
    try:
        from nemo.lens import NemoLensConfig, setup_telemetry
    except ImportError:
        _GLOBAL_TELEMETRY_HANDLE = None
        return
    MegatronSpanGroup = _megatron_span_group()
    config = NemoLensConfig.from_env(prefix="MEGATRON_OTEL", fallback_prefix="NEMO_LENS",
                                     span_group_cls=MegatronSpanGroup)
    config.service_name = "megatron-lm"
    config.enabled = True  # --otel-enabled
    _GLOBAL_TELEMETRY_HANDLE = setup_telemetry(config, rank=rank, world_size=world_size,
                                               resource_attributes={"megatron.num_layers": 2})


def _otel_mark_goodput(span):
    try:
        span.set_attribute("is_goodput_span", True)
    except Exception:  # noqa: BLE001
        pass


def _backdated_otel_span(name, start, end):
    if not _otel_sg_enabled("job") or start is None or end is None:
        return
    span = get_telemetry().tracer.start_span(name, start_time=int(start * 1e9))
    _otel_mark_goodput(span)
    span.end(end_time=int(end * 1e9))


def _start_otel_job_spans(stamps):
    """training._start_otel_job_spans's shape: pre_startup, then megatron.startup rooted in an empty Context and
    attached, with its back-dated children."""
    if not _otel_sg_enabled("job"):
        return None, None, None
    from opentelemetry import context as _otel_ctx, trace as _otel_trace
    from opentelemetry.context import Context as _OtelContext
    _backdated_otel_span("pre_startup", stamps["slurm_job_start_time"], stamps["launch_script_start"])
    startup = get_telemetry().tracer.start_span("megatron.startup", context=_OtelContext(),
                                                start_time=int(stamps["launch_script_start"] * 1e9))
    _otel_mark_goodput(startup)
    _otel_safe_set_attrs(startup, {"megatron.model_type": "ModelType.encoder_or_decoder"})
    startup_context = startup.get_span_context()
    token = _otel_ctx.attach(_otel_trace.set_span_in_context(startup))
    _backdated_otel_span("megatron.startup.launch_script", stamps["launch_script_start"],
                         stamps["launch_script_presrun"])
    _backdated_otel_span("megatron.startup.container_load", stamps["launch_script_presrun"], stamps["program_start"])
    return startup, startup_context, token


def _reroot_otel_interval(previous, previous_token, startup_context):
    """training._reroot_otel_interval's shape: close the previous block, open the next in a new trace, linked."""
    from opentelemetry import context as _octx, trace as _otr
    from opentelemetry.context import Context
    from opentelemetry.trace import Link
    links = [Link(previous.get_span_context())] if previous is not None else [Link(startup_context)]
    if previous is not None:
        _octx.detach(previous_token)
        previous.end()
    span = get_telemetry().tracer.start_span("megatron.train", context=Context(), links=links)
    _otel_mark_goodput(span)
    return span, _octx.attach(_otr.set_span_in_context(span))


@_otel_trace_fn("forward_backward", "megatron.train.iteration.forward_backward")
def forward_backward(iteration):
    carrier = _otel_get_pp_carrier()  # schedules.py: the linked span around recv_forward, ended without `with`
    if carrier is not None and _otel_sg_enabled("communication") and _otel_create_linked_span is not None:
        from opentelemetry import trace as _otel_trace_mod
        linked = _otel_create_linked_span(_otel_trace_mod.get_tracer("nemo.lens"), "megatron.pp.recv_forward.linked",
                                          remote_carrier=carrier, **{"dl.pipeline_parallel.rank": 1,
                                                                     "dl.microbatch_id": 0})
        time.sleep(0.001)  # recv_forward
        linked.end()
    return 2.5 - 0.1 * iteration


def _tag_current_span_call_idx(call_idx):
    """async_utils._tag_current_span_call_idx's shape."""
    try:
        from opentelemetry import trace as _ot
        from nemo.lens.helpers import safe_set_span_attributes as _set
        _set(_ot.get_current_span(), {"nvrx.call_idx": call_idx})
    except Exception:  # noqa: BLE001
        pass


def save_checkpoint_and_time(iteration):
    """training.save_checkpoint_and_time's shape: the exposed-save span attached by hand, the save inside it."""
    exposed, token = None, None
    if _otel_sg_enabled("checkpoint"):
        from opentelemetry import context as _octx, trace as _otr
        exposed = get_telemetry().tracer.start_span("megatron.checkpoint.exposed_save")
        _otel_mark_goodput(exposed)
        exposed.set_attribute("megatron.iteration", iteration)
        token = _octx.attach(_otr.set_span_in_context(exposed))
    try:
        with _otel_managed_span("checkpoint", "megatron.checkpoint.save"):
            _tag_current_span_call_idx(iteration)
    finally:
        if exposed is not None:
            from opentelemetry import context as _octx
            _octx.detach(token)
            exposed.end()


@_otel_trace_fn("evaluate", "megatron.evaluate")
def evaluate(eval_iters):
    try:
        from opentelemetry import trace as _ot
        _ot.get_current_span().set_attribute("megatron.eval_iters", eval_iters)
    except Exception:  # noqa: BLE001
        pass


def record_training_metrics(meter, step_duration_ms=None, loss=None, skipped_iters=None):
    """training_metrics.record_training_metrics's shape (instruments cached per meter in a WeakKeyDictionary)."""
    if _otel_metrics is None:
        return
    instruments = _TRAINING_INSTRUMENTS.get(meter)
    if instruments is None:
        instruments = {"step_duration_ms": meter.create_histogram(name="megatron.training.step_duration_ms", unit="ms"),
                       "loss": meter.create_gauge(name="megatron.training.loss"),
                       "skipped_iters": meter.create_counter(name="megatron.training.skipped_iters")}
        _TRAINING_INSTRUMENTS[meter] = instruments
    if step_duration_ms is not None:
        instruments["step_duration_ms"].record(step_duration_ms)
    if loss is not None:
        instruments["loss"].set(loss)
    if skipped_iters:
        instruments["skipped_iters"].add(skipped_iters)


def main(out_path):
    now = time.time()
    stamps = {"slurm_job_start_time": now - 30, "launch_script_start": now - 20, "launch_script_presrun": now - 15,
              "program_start": now - 10}
    _set_telemetry(rank=0, world_size=1)
    startup, startup_context, startup_token = _start_otel_job_spans(stamps)
    if get_telemetry() is not None:
        from nemo.lens.propagation import inject_context
        carrier = {}
        inject_context(carrier)  # rank 0's context as broadcast_trace_context would give it
        set_pp_trace_carrier(carrier)
    if startup is not None:
        from opentelemetry import context as _otel_ctx
        _otel_ctx.detach(startup_token)
        startup.end()
    interval, token = None, None
    for iteration in range(4):
        if _otel_sg_enabled("job") and iteration % 2 == 0:  # save_interval 2
            interval, token = _reroot_otel_interval(interval, token, startup_context)
        with _otel_managed_span("step", "megatron.train.iteration", **{"megatron.iteration": iteration}) as span:
            loss = forward_backward(iteration)
            _otel_safe_set_attrs(span, {"megatron.loss": loss})
        handle = get_telemetry()
        if handle is not None and handle.is_exporting:
            record_training_metrics(handle.meter, step_duration_ms=100.0 + iteration, loss=loss, skipped_iters=1)
        if iteration % 2 == 1:
            save_checkpoint_and_time(iteration)
    evaluate(eval_iters=3)
    if interval is not None:
        from opentelemetry import context as _octx
        _octx.detach(token)
        interval.end()
    live = get_telemetry() is not None
    if live:
        from opentelemetry import trace as _ot
        _ot.get_tracer_provider().force_flush()  # the SIGTERM path's graceful drain
        get_telemetry().shutdown()
    with open(out_path, "w", encoding="utf-8") as out:
        json.dump({"live": live, "stamps": stamps}, out)


if __name__ == "__main__":
    main(sys.argv[1])
