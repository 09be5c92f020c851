#!/usr/bin/python3
"""pretrain_gpt.py: a Megatron-style GPT pretraining run in PyTorch, traced by lens from Python.

The Python twin of the C++ reference trainer (trainer/pretrain_gpt.cc): a small byte-level GPT, tensor parallel x
data parallel x pipeline parallel over torch.distributed with Gloo (Megatron's rank order, 1F1B schedule, CPU,
activation recomputation with --recompute-granularity full), launched by torchrun or by hand (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT). It takes the same Megatron flags (the subset it needs) and the same
MEGATRON_OTEL_* / OTEL_* environment, and is instrumented the way Megatron-LM's code is: NeMo Lens's helpers
imported through Megatron's idiom (so it runs on lens through lens.compat.nemo_lens, and with no telemetry at all
where neither is installed), decorators on step functions, span groups from MegatronSpanGroup, and the
OpenTelemetry API where Megatron calls it (the job spans started and attached by hand, the current span's
attributes), which lens serves. It emits the span
tree of CONTRACT §6 at the same places as the C++ trainer, links each pipeline receive to the sending stage's span
through the 26-byte context sent with the activation, builds the Megatron resource with the same function, and
records the training metrics and the logs (Python logging, bridged). What NeMo Lens does not have (the resource
builder, the span names of SPAN_NAMES, the run id, the 26-byte context form, step traces) comes from lens itself.

    torchrun --nproc_per_node 4 examples/python/pretrain_gpt.py --pipeline-model-parallel-size 2 \\
        --train-iters 20 --otel-enabled --otel-span-groups all
"""

import time

PROGRAM_START_NS = time.time_ns()  # before the imports: Megatron's megatron.startup.imports starts here

import argparse  # noqa: E402
import contextlib  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

# Megatron-LM's call-site idiom: NeMo Lens's helpers when it (or lens's shim for it) is there, no-ops otherwise.
try:
    import lens.compat.nemo_lens  # noqa: F401: opt-in, makes nemo.lens resolve to lens where no NeMo Lens is
except ImportError:
    pass
try:  # megatron/training/training.py's imports, in its form
    from nemo.lens.state import is_span_group_enabled as _otel_sg_enabled
    from nemo.lens.helpers import managed_span as _otel_managed_span
    from nemo.lens.helpers import safe_set_span_attributes as _otel_safe_set_attrs
    from nemo.lens.helpers import trace_fn as _otel_trace_fn
    from nemo.lens.groups import SpanGroup
except ImportError:
    from lens.fallbacks import is_span_group_enabled as _otel_sg_enabled
    from lens.fallbacks import managed_span as _otel_managed_span
    from lens.fallbacks import safe_set_span_attributes as _otel_safe_set_attrs
    from lens.fallbacks import trace_fn as _otel_trace_fn

    class SpanGroup:  # the stand-in Megatron keeps for when NeMo Lens is missing: constants only
        JOB, CHECKPOINT, EVALUATE, MODEL_INIT = "job", "checkpoint", "evaluate", "model_init"
        LOAD_CHECKPOINT, STEP, FORWARD_BACKWARD, OPTIMIZER = "load_checkpoint", "step", "forward_backward", "optimizer"
        ALL_GROUPS = frozenset()
        _PRESETS = {}

        @classmethod
        def resolve(cls, spec, source=""):
            raise RuntimeError("resolving a span-group spec needs NeMo Lens (or lens)")


class MegatronSpanGroup(SpanGroup):
    """Megatron's catalogue (megatron/core/telemetry/span_groups.py): the base groups and eight more."""

    MICROBATCH = "microbatch"
    LAYER = "layer"
    COMMUNICATION = "communication"
    ACTIVATION_OFFLOAD = "activation_offload"
    DATA_LOADING = "data_loading"
    FIRST_ITERATION = "first_iteration"
    TRACE_REGION = "trace_region"
    INFERENCE = "inference"
    ALL_GROUPS = SpanGroup.ALL_GROUPS | {MICROBATCH, LAYER, COMMUNICATION, ACTIVATION_OFFLOAD, DATA_LOADING,
                                         FIRST_ITERATION, TRACE_REGION, INFERENCE}
    _PRODUCTION = frozenset({SpanGroup.JOB, SpanGroup.CHECKPOINT, SpanGroup.EVALUATE, FIRST_ITERATION, INFERENCE})
    _PRESETS = {
        "default": _PRODUCTION,
        "per_step": _PRODUCTION | {SpanGroup.MODEL_INIT, SpanGroup.LOAD_CHECKPOINT, SpanGroup.STEP,
                                   SpanGroup.FORWARD_BACKWARD, SpanGroup.OPTIMIZER, COMMUNICATION, DATA_LOADING},
        "all": ALL_GROUPS,
        "profiling": ALL_GROUPS,
        "full": ALL_GROUPS,
    }


G = MegatronSpanGroup
log = logging.getLogger("megatron.training")
GOODPUT = {"is_goodput_span": True}
VOCAB = 256
FORWARD, BACKWARD, FORWARD_CONTEXT = 1, 2, 3  # point-to-point tags, as the C++ trainer's
DOCUMENTED_NAMES = {
    "model_init": "megatron.model_init", "load_checkpoint": "megatron.load_checkpoint",
    "load_checkpoint_io_read": "megatron.load_checkpoint.io_read", "data_loading": "megatron.data_loading",
    "train_step": "megatron.train_step", "forward_backward": "megatron.forward_backward",
    "optimizer_step": "megatron.optimizer_step", "save_checkpoint": "megatron.save_checkpoint",
    "save_checkpoint_state_dict": "megatron.save_checkpoint.state_dict",
    "save_checkpoint_io_write": "megatron.save_checkpoint.io_write",
    "num_microbatches_key": "megatron.num_microbatches",
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    add = p.add_argument
    add("--num-layers", type=int, default=4)
    add("--hidden-size", type=int, default=64)
    add("--num-attention-heads", type=int, default=4)
    add("--seq-length", type=int, default=64)
    add("--micro-batch-size", type=int, default=4)
    add("--global-batch-size", type=int, default=16)
    add("--train-iters", type=int, default=100)
    add("--lr", type=float, default=3e-3)
    add("--min-lr", type=float, default=3e-4)
    add("--lr-warmup-iters", type=int, default=10)
    add("--lr-decay-style", choices=("constant", "linear", "cosine"), default="cosine")
    add("--weight-decay", type=float, default=0.01)
    add("--clip-grad", type=float, default=1.0)
    add("--pipeline-model-parallel-size", type=int, default=1)
    add("--tensor-model-parallel-size", type=int, default=1, help="ranks that split each layer (attention heads, "
        "MLP columns); must divide --num-attention-heads")
    add("--recompute-granularity", choices=("full",), default=None, help="full: keep only each recomputed layer's "
        "input in forward, run its forward again in backward")
    add("--recompute-method", choices=("uniform", "block"), default=None, help="uniform: every layer, in chunks of "
        "--recompute-num-layers; block: only the first --recompute-num-layers layers of each stage")
    add("--recompute-num-layers", type=int, default=1)
    add("--seed", type=int, default=1234)
    add("--data-path", default="", help="text file to train on (default: the project's docs)")
    add("--save", default="")
    add("--load", default="")
    add("--save-interval", type=int, default=0)
    add("--eval-interval", type=int, default=0)
    add("--eval-iters", type=int, default=4)
    add("--log-interval", type=int, default=10)
    add("--log-throughput", action="store_true")
    add("--peak-tflops", type=float, default=0.0, help="the GPU's peak TFLOP/s for megatron.training.mfu (default: "
        "from NVML's device name with --bf16/--fp16)")
    add("--bf16", action="store_true", help="accepted for Megatron compatibility; this CPU trainer computes in fp32")
    add("--fp16", action="store_true", help="accepted for Megatron compatibility; this CPU trainer computes in fp32")
    add("--ckpt-format", choices=("torch",), default="torch")
    add("--profile", action="store_true", help="profile iterations [--profile-step-start, --profile-step-end)")
    add("--use-pytorch-profiler", action="store_true", help="with --profile: torch.profiler, its trace written to "
        "--tensorboard-dir as rank<R>.pt.trace.json (for lens convert --merge)")
    add("--profile-step-start", type=int, default=10)
    add("--profile-step-end", type=int, default=12)
    add("--profile-ranks", type=int, nargs="+", default=[0])
    add("--tensorboard-dir", default="")
    otel = p.add_argument_group(title="opentelemetry")  # Megatron's group of these flags
    otel.add_argument("--otel-enabled", action="store_true",
                      help="turn telemetry on (else MEGATRON_OTEL_ENABLED decides)")
    otel.add_argument("--otel-service-name", default=None, help="telemetry service name")
    otel.add_argument("--otel-span-groups", default=None, help="span-group spec, e.g. per_step or all,-layer")
    add("--testing-fake-cuda", default="", help="testing aid: the CUDA runtime's simulator (libcudart.so.12 of the "
        "tests); each layer's attention and MLP also queue a simulated kernel of --testing-kernel-us on a stream of "
        "it, set as lens's device stream")
    add("--testing-kernel-us", type=float, default=500.0, help="testing aid: see --testing-fake-cuda")
    args = p.parse_args(argv)
    args.rank = int(os.environ.get("RANK", "0"))
    args.world_size = int(os.environ.get("WORLD_SIZE", "1"))
    args.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    pp, tp = args.pipeline_model_parallel_size, args.tensor_model_parallel_size
    fail = lambda what: p.error(what)  # noqa: E731
    if pp < 1 or tp < 1:
        fail("--pipeline-model-parallel-size and --tensor-model-parallel-size must be positive")
    if args.world_size % (tp * pp):
        fail(f"the world size {args.world_size} is not divisible by --tensor-model-parallel-size {tp} x "
             f"--pipeline-model-parallel-size {pp}")
    args.data_parallel_size = args.world_size // (tp * pp)
    if args.num_layers % pp:
        fail(f"--num-layers {args.num_layers} is not divisible by --pipeline-model-parallel-size {pp}")
    if args.hidden_size % args.num_attention_heads:
        fail(f"--hidden-size {args.hidden_size} is not divisible by --num-attention-heads {args.num_attention_heads}")
    if args.num_attention_heads % tp:
        fail(f"--num-attention-heads {args.num_attention_heads} is not divisible by --tensor-model-parallel-size {tp}")
    if (args.recompute_granularity is None) != (args.recompute_method is None):
        fail("--recompute-granularity full and --recompute-method go together")
    if args.recompute_num_layers < 1:
        fail("--recompute-num-layers must be positive")
    if args.global_batch_size % (args.micro_batch_size * args.data_parallel_size):
        fail(f"--global-batch-size {args.global_batch_size} is not divisible by --micro-batch-size "
             f"{args.micro_batch_size} x data-parallel size {args.data_parallel_size}")
    if args.profile and args.use_pytorch_profiler and not args.tensorboard_dir:
        fail("--use-pytorch-profiler writes its trace to --tensorboard-dir: give one")
    if args.profile and args.profile_step_end <= args.profile_step_start:
        fail(f"--profile-step-end {args.profile_step_end} is not after --profile-step-start {args.profile_step_start}")
    # Megatron's rank order: tensor parallel fastest, then data parallel, then pipeline.
    args.stage = args.rank // (args.data_parallel_size * tp)
    args.data_rank = args.rank // tp % args.data_parallel_size
    args.tensor_rank = args.rank % tp
    # For the resource's dl.*_parallel.rank (lens.megatron.build_telemetry_resource_attrs).
    args.tensor_model_parallel_rank, args.pipeline_model_parallel_rank = args.tensor_rank, args.stage
    args.data_parallel_rank = args.data_rank
    args.microbatches = args.global_batch_size // (args.micro_batch_size * args.data_parallel_size)
    return args


# --- telemetry, set up as Megatron's _set_telemetry does ---------------------------------------------------------

class Telemetry:
    """The handle, the tracer and the span names; inert where NeMo Lens (or lens) is missing."""

    def __init__(self, args):
        self.handle = None
        self.names = dict(DOCUMENTED_NAMES)
        self.megatron_tree = False
        self.step_layout = False
        self.active = False
        try:
            from nemo.lens import NemoLensConfig, setup_telemetry
            import opentelemetry.trace  # noqa: F401: NeMo Lens's dependency, whose API the run's job spans use
        except ImportError:
            return
        try:
            config = NemoLensConfig.from_env(prefix="MEGATRON_OTEL", fallback_prefix="NEMO_LENS",
                                             span_group_cls=MegatronSpanGroup)
        except ValueError as error:  # lens.ConfigError: the variable, the value, what is valid
            sys.exit(f"pretrain_gpt.py: {error}")
        if not os.environ.get("OTEL_SERVICE_NAME", "").strip():
            config.service_name = "megatron-lm"
        if args.otel_enabled:
            config.enabled = True
        if args.otel_service_name:
            config.service_name = args.otel_service_name
        if args.otel_span_groups:
            config.span_groups = args.otel_span_groups
            config.span_groups_source = "--otel-span-groups"
        if config.enabled:  # a typo in the spec fails every rank here, before the rendezvous
            try:
                config.resolved_span_groups  # noqa: B018
            except ValueError as error:
                sys.exit(f"pretrain_gpt.py: {error}")
        self.config = config
        self.setup_telemetry = setup_telemetry

    def set_up(self, args, run_id):
        if not hasattr(self, "config"):
            return
        from lens.megatron import build_telemetry_resource_attrs, span_names
        from nemo.lens.logging_bridge import setup_logging_bridge
        config = self.config
        config.run_id = run_id
        resource_attrs = build_telemetry_resource_attrs(args) if config.enabled else {}  # NVML only when on
        self.handle = self.setup_telemetry(config, rank=args.rank, world_size=args.world_size,
                                           resource_attributes=resource_attrs)
        # megatron.training.mfu's denominator: --peak-tflops, else the rank's GPU as NVML names it, else none.
        from lens.megatron import peak_tflops
        gpu = resource_attrs.get("dl.gpu.name") if self.handle.is_exporting else None
        self.peak_tflops = args.peak_tflops or (peak_tflops(gpu, args.bf16 or args.fp16) if gpu else None)
        if config.enabled and config.logs_enabled and self.handle.is_exporting:
            setup_logging_bridge()
        self.names = span_names(config.span_names)
        # SPAN_NAMES=megatron: today's Megatron-LM's span tree (no run-long span: startup and each segment are
        # traces of their own), with its names and attributes.
        self.megatron_tree = config.span_names == "megatron"
        self.step_layout = config.trace_layout == "step"
        self.active = config.active

    @property
    def tracer(self):
        return self.handle.tracer if self.handle is not None else None

    def span(self, group, name, attributes=None, **options):
        """A span of `group` for a `with` block, with lens's options (root, trace_id, links); None when off."""
        if self.handle is None or not _otel_sg_enabled(group):
            return contextlib.nullcontext()
        return self.tracer.start_as_current_span(name, attributes=attributes, **options)

    @contextlib.contextmanager
    def attached_span(self, group, name, attributes=None, root=False, links=None, start_time=None):
        """Megatron's explicit-span shape (training.py's startup and interval blocks), through the OpenTelemetry
        API that lens serves: start_span (in an empty Context for a new trace, with Links, at start_time if given),
        then context.attach(set_span_in_context(span)); at the end detach, then end. Yields the span, or None when
        off."""
        if self.handle is None or not _otel_sg_enabled(group):
            yield None
            return
        from opentelemetry import context as _octx, trace as _otr
        from opentelemetry.context import Context
        span = self.tracer.start_span(name, context=Context() if root else None, attributes=attributes,
                                      links=[_otr.Link(link) for link in links or () if link is not None],
                                      start_time=start_time)
        token = _octx.attach(_otr.set_span_in_context(span))
        try:
            yield span
        finally:
            _octx.detach(token)
            span.end()

    def backdated_span(self, group, name, start_ns, end_ns):
        """Megatron's _backdated_otel_span: a phase already over, as a closed span of the current one (goodput)."""
        if self.handle is None or not _otel_sg_enabled(group):
            return
        self.tracer.start_span(name, start_time=start_ns, attributes=GOODPUT).end(end_time=end_ns)

    def started_span(self, group, name, attributes=None):
        """A span started now and not made current (a sibling of what follows), or None."""
        if self.handle is None or not _otel_sg_enabled(group):
            return None
        return self.tracer.start_span(name, attributes=attributes)

    def span_group_request(self):
        """Rank 0: the span-group change `lens ctl` asked for, as 4 words to all-reduce with MAX; zeros elsewhere."""
        if self.handle is None:
            return [0, 0, 0, 0]
        from lens import take_span_group_request
        return take_span_group_request()

    def at_iteration_boundary(self, iteration, agreed):
        if self.handle is not None:
            from lens import at_iteration_boundary
            at_iteration_boundary(iteration, agreed)

    def phase(self, kind):
        """The block's time counted as this step's compute or wait (lens/straggler.h), on every rank, whatever the
        span groups; nothing without lens."""
        if self.handle is None:
            return contextlib.nullcontext()
        from lens import step_phase
        return step_phase(kind)

    def end_step(self, iteration):
        """True when this step closes a straggler window: then every rank calls gather_stragglers."""
        if self.handle is None:
            return False
        from lens import end_step, straggler_summary_due
        end_step(iteration)
        return straggler_summary_due(iteration)

    def gather_stragglers(self, iteration, args):
        """Each rank's window summary in its own slot, gathered by one SUM all-reduce; the lowest exporting rank
        hands them to lens's scoring thread. What was scored since the last window (a dict), or None."""
        from lens import score_stragglers, take_straggler_findings, take_straggler_summary
        mine = take_straggler_summary(iteration, args.stage, args.tensor_rank)
        slots = torch.zeros(args.world_size * len(mine), dtype=torch.long)
        slots[args.rank * len(mine):(args.rank + 1) * len(mine)] = torch.tensor(mine, dtype=torch.long)
        dist.all_reduce(slots)
        score_stragglers(iteration, slots.view(args.world_size, len(mine)).tolist())
        return take_straggler_findings()

    def record_metrics(self, **values):
        if self.handle is not None:
            from lens.megatron import record_training_metrics
            if getattr(self, "peak_tflops", None):
                values["mfu"] = values["throughput_tflops"] / self.peak_tflops
            record_training_metrics(self.handle.meter, **values)

    def shutdown(self):
        if self.handle is not None:
            self.handle.shutdown()


def tag_current_span_call_idx(call_idx):
    """megatron/training/async_utils.py's: the save request's call_idx on whatever span is current."""
    try:
        from opentelemetry import trace as _ot
        _otel_safe_set_attrs(_ot.get_current_span(), {"nvrx.call_idx": call_idx})
    except Exception:  # noqa: BLE001: telemetry must never break checkpointing
        pass


def shared_run_id(telemetry):
    """One run id on every rank: rank 0's (the launcher may give none)."""
    run_id = [None]
    if dist.get_rank() == 0 and hasattr(telemetry, "config"):
        from lens import resolve_run_id
        run_id[0] = resolve_run_id(telemetry.config)
    dist.broadcast_object_list(run_id, src=0)
    return run_id[0] or ""


def context_tensor(context):
    """A span context as 26 floats (its binary form, a byte each), the dtype the stages exchange."""
    from lens import to_bytes
    return torch.tensor(list(to_bytes(context)), dtype=torch.float32)


def context_of(tensor):
    from lens import from_bytes
    return from_bytes(bytes(int(v) for v in tensor.tolist()))


# --- the model ----------------------------------------------------------------------------------------------------

class SimulatedGpu:
    """Testing aid (not Megatron's), as the C++ trainer's trainer/simulated_gpu.h: with --testing-fake-cuda, kernels of
    --testing-kernel-us queued on one stream of the CUDA runtime's simulator, beside the CPU work, and that stream set
    as the training thread's device stream (lens.set_device_stream), for runs with MEGATRON_OTEL_DEVICE_TIMING=cuda."""

    launch = None

    @classmethod
    def open(cls, path, kernel_us):
        if not path:
            return
        import ctypes
        simulator = ctypes.CDLL(path)  # the library lens loads by the same path: one device
        simulator.fake_cuda_stream_create.restype = ctypes.c_void_p
        simulator.fake_cuda_launch_kernel.argtypes = [ctypes.c_void_p, ctypes.c_double]
        stream = simulator.fake_cuda_stream_create()
        cls.launch = staticmethod(lambda: simulator.fake_cuda_launch_kernel(stream, kernel_us))
        try:
            import lens  # lens's own call, not NeMo Lens's
            lens.set_device_stream(stream)
        except ImportError:
            pass

    @classmethod
    def kernel(cls):
        if cls.launch is not None:
            cls.launch()


# Megatron's tensor-parallel layers (megatron/core/tensor_parallel), as the C++ trainer's trainer/tensor_parallel.h: a
# linear layer split by output columns (column-parallel) or input rows (row-parallel) over the tensor-parallel group,
# with the two all-reduces that hide the split. Each all-reduce is the span megatron.tp.all_reduce (communication) with
# megatron.tp.region (Megatron's function) and megatron.tp.pass (the micro-batch's pass: a recomputed forward runs in
# backward), and a wait of the step. A split layer is drawn whole from the same random stream on every rank, then cut,
# so the weights are the same whatever the tensor-parallel size.

class TensorParallel:
    """The group a layer is split over, and what its all-reduces are timed with."""

    def __init__(self, size=1, rank=0, group=None, phase=None):
        self.size, self.rank, self.group = size, rank, group
        self.phase = phase or (lambda kind: contextlib.nullcontext())
        self.backward_pass = False  # set by the trainer around a micro-batch's backward

    def all_reduce(self, tensor, region):
        attributes = {"megatron.tp.region": region, "megatron.tp.pass": "backward" if self.backward_pass else "forward"}
        with _otel_managed_span(G.COMMUNICATION, "megatron.tp.all_reduce", **attributes), self.phase("wait"):
            dist.all_reduce(tensor, group=self.group)
        return tensor


class _CopyToRegion(torch.autograd.Function):
    """copy_to_tensor_model_parallel_region: identity in forward, the gradient summed over the group in backward."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return x

    @staticmethod
    def backward(ctx, grad):
        return ctx.tp.all_reduce(grad.contiguous().clone(), "copy_to_tensor_model_parallel_region"), None


class _ReduceFromRegion(torch.autograd.Function):
    """reduce_from_tensor_model_parallel_region: the partial outputs summed over the group in forward; identity in
    backward."""

    @staticmethod
    def forward(ctx, x, tp):
        return tp.all_reduce(x.contiguous().clone(), "reduce_from_tensor_model_parallel_region")

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class ColumnParallelLinear(nn.Module):
    """y = x W^T + b, W's output rows split; `parts` equal blocks of the output (QKV: 3) each split alike."""

    def __init__(self, fan_in, fan_out, tp, parts=1):
        super().__init__()
        self.tp = tp
        whole = nn.Linear(fan_in, fan_out)
        block = fan_out // parts
        local = block // tp.size
        rows = [p * block + tp.rank * local + i for p in range(parts) for i in range(local)]
        self.weight = nn.Parameter(whole.weight.detach()[rows].clone())
        self.bias = nn.Parameter(whole.bias.detach()[rows].clone())

    def forward(self, x):
        if self.tp.size > 1:
            x = _CopyToRegion.apply(x, self.tp)
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """y = x W^T + b, W's input columns split: the partial products summed over the group, b added once after."""

    def __init__(self, fan_in, fan_out, tp):
        super().__init__()
        self.tp = tp
        whole = nn.Linear(fan_in, fan_out)
        local = fan_in // tp.size
        self.weight = nn.Parameter(whole.weight.detach()[:, tp.rank * local:(tp.rank + 1) * local].clone())
        self.bias = nn.Parameter(whole.bias.detach().clone())

    def forward(self, x):
        if self.tp.size == 1:
            return F.linear(x, self.weight, self.bias)
        return _ReduceFromRegion.apply(F.linear(x, self.weight), self.tp) + self.bias


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads, tp):
        super().__init__()
        self.heads = heads // tp.size  # this rank's
        self.qkv = ColumnParallelLinear(hidden, 3 * hidden, tp, parts=3)
        self.proj = RowParallelLinear(hidden, hidden, tp)

    @_otel_trace_fn(G.LAYER, "megatron.layer.self_attention")
    def forward(self, x):
        b, s, _ = x.shape
        qkv = self.qkv(x)
        head_dim = qkv.shape[-1] // (3 * self.heads)
        q, k, v = qkv.view(b, s, 3, self.heads, head_dim).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(head_dim)
        mask = torch.ones(s, s, dtype=torch.bool).triu(1)
        out = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
        SimulatedGpu.kernel()
        return self.proj(out.transpose(1, 2).reshape(b, s, self.heads * head_dim))


class Mlp(nn.Module):
    def __init__(self, hidden, tp):
        super().__init__()
        self.up = ColumnParallelLinear(hidden, 4 * hidden, tp)
        self.down = RowParallelLinear(4 * hidden, hidden, tp)

    @_otel_trace_fn(G.LAYER, "megatron.layer.mlp")
    def forward(self, x):
        SimulatedGpu.kernel()
        return self.down(F.gelu(self.up(x)))


class TransformerLayer(nn.Module):
    def __init__(self, hidden, heads, layer_number, tp):
        super().__init__()
        self.layer_number = layer_number
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.attention, self.mlp = SelfAttention(hidden, heads, tp), Mlp(hidden, tp)

    def forward(self, x):
        with _otel_managed_span(G.LAYER, "megatron.layer.forward", **{"megatron.layer_number": self.layer_number}):
            x = x + self.attention(self.norm1(x))
            return x + self.mlp(self.norm2(x))


class _RecomputedLayers(torch.autograd.Function):
    """Full activation recomputation (Megatron's tensor_parallel.checkpoint): forward runs the layers without keeping
    what backward needs and keeps their input; backward runs them again, inside megatron.activation.recompute (group
    activation_offload), then back-propagates through that run."""

    @staticmethod
    def forward(ctx, x, layers):
        ctx.layers = layers
        ctx.save_for_backward(x)
        with torch.no_grad():
            for layer in layers:
                x = layer(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        x = ctx.saved_tensors[0].detach().requires_grad_(True)
        with _otel_managed_span(G.ACTIVATION_OFFLOAD, "megatron.activation.recompute",
                                **{"megatron.layer_number": ctx.layers[0].layer_number}), torch.enable_grad():
            y = x
            for layer in ctx.layers:
                y = layer(y)
        torch.autograd.backward(y, grad)
        return x.grad, None


class GptStage(nn.Module):
    """One pipeline stage: the embeddings on the first, the head on the last; with tensor parallelism the attention
    heads and the MLP's columns split over the group, the rest whole on every rank."""

    def __init__(self, args, tp):
        super().__init__()
        self.first, self.last = args.stage == 0, args.stage == args.pipeline_model_parallel_size - 1
        per_stage = args.num_layers // args.pipeline_model_parallel_size
        h = args.hidden_size
        if self.first:
            self.tokens, self.positions = nn.Embedding(VOCAB, h), nn.Embedding(args.seq_length, h)
        self.layers = nn.ModuleList(TransformerLayer(h, args.num_attention_heads, args.stage * per_stage + i + 1, tp)
                                    for i in range(per_stage))
        if self.last:
            self.norm, self.head = nn.LayerNorm(h), nn.Linear(h, VOCAB)
        self.chunks = self.recomputed_chunks(args, per_stage)

    @staticmethod
    def recomputed_chunks(args, layers):
        """[begin, end) of each run of layers: recomputed ones per --recompute-method, the rest one by one."""
        n = args.recompute_num_layers
        if args.recompute_method == "uniform":
            return [(b, min(b + n, layers), True) for b in range(0, layers, n)]
        if args.recompute_method == "block":
            return [(b, b + 1, b < n) for b in range(layers)]
        return [(b, b + 1, False) for b in range(layers)]

    def forward(self, x):
        if self.first:
            x = self.tokens(x) + self.positions(torch.arange(x.shape[1]))
        recomputes = torch.is_grad_enabled() and x.requires_grad
        for begin, end, recomputed in self.chunks:
            if recomputes and recomputed:
                x = _RecomputedLayers.apply(x, list(self.layers[begin:end]))
            else:
                for layer in self.layers[begin:end]:
                    x = layer(x)
        return self.head(self.norm(x)) if self.last else x

    def tensor_parallel_duplicates(self):
        """The parameters every tensor-parallel rank holds whole: counted once in the gradient norm."""
        split = set()
        for module in self.modules():
            if isinstance(module, ColumnParallelLinear):
                split.update({id(module.weight), id(module.bias)})
            elif isinstance(module, RowParallelLinear):
                split.add(id(module.weight))
        return [p for p in self.parameters() if id(p) not in split]


def flops_per_iteration(args):
    h, s, layers = args.hidden_size, args.seq_length, args.num_layers
    per_token = 24 * layers * h * h + 4 * layers * s * h + 2 * h * VOCAB
    return 3 * per_token * s * args.global_batch_size


# --- data -------------------------------------------------------------------------------------------------------

def load_corpus(path):
    if path:
        text = pathlib.Path(path).read_bytes()
    else:  # the project's own documentation: real English prose, always present
        root = pathlib.Path(__file__).resolve().parents[2]
        files = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
        text = b"".join(f.read_bytes() for f in sorted(files))
    split = len(text) * 9 // 10
    return torch.tensor(list(text[:split]), dtype=torch.long), torch.tensor(list(text[split:]), dtype=torch.long)


def batch_of(data, args, iteration, micro, stream):
    seed = int.from_bytes(hashlib.sha256(f"{args.seed}/{iteration}/{args.data_rank}/{micro}/{stream}".encode())
                          .digest()[:8], "little")
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(data) - args.seq_length - 1, (args.micro_batch_size,), generator=generator)
    return torch.stack([data[s:s + args.seq_length + 1] for s in starts.tolist()])


# --- training -------------------------------------------------------------------------------------------------

class Trainer:
    def __init__(self, args, telemetry, corpus):
        self.args, self.telemetry, self.corpus = args, telemetry, corpus
        self.iteration = 0
        dp, pp, tp = args.data_parallel_size, args.pipeline_model_parallel_size, args.tensor_model_parallel_size
        rank_of = lambda stage, data, tensor: (stage * dp + data) * tp + tensor  # noqa: E731: Megatron's order
        self.pipeline = self.data = tensor_group = None
        # Every rank makes every group, in the same order (torch.distributed's rule).
        for d in range(dp):
            for t in range(tp):
                group = dist.new_group([rank_of(s, d, t) for s in range(pp)])
                if (d, t) == (args.data_rank, args.tensor_rank):
                    self.pipeline = group
        for s in range(pp):
            for t in range(tp):
                group = dist.new_group([rank_of(s, d, t) for d in range(dp)])
                if (s, t) == (args.stage, args.tensor_rank):
                    self.data = group
            for d in range(dp):
                group = dist.new_group([rank_of(s, d, t) for t in range(tp)])
                if (s, d) == (args.stage, args.data_rank):
                    tensor_group = group
        self.tp = TensorParallel(tp, args.tensor_rank, tensor_group, telemetry.phase)
        # The last stage's rank in this rank's pipeline group: the loss comes from it.
        self.last_stage_rank = rank_of(pp - 1, args.data_rank, args.tensor_rank)
        torch.manual_seed(args.seed + args.stage)
        self.model = GptStage(args, self.tp)
        self.duplicates = self.model.tensor_parallel_duplicates()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
        self.next_rank, self.previous_rank = args.rank + dp * tp, args.rank - dp * tp
        self.pending_sends = []

    @property
    def names(self):
        return self.telemetry.names

    @property
    def part_goodput(self):
        """SPAN_NAMES=megatron: a checkpoint's parts count toward goodput, as Megatron marks them."""
        return GOODPUT if self.telemetry.megatron_tree else {}

    def activation_shape(self):
        return (self.args.micro_batch_size, self.args.seq_length, self.args.hidden_size)

    # point-to-point, each in its span (megatron/core/pipeline_parallel/p2p_communication.py)
    def recv_forward(self, micro, linked):
        if self.model.first:
            return None
        attributes = {"dl.pipeline_parallel.rank": self.args.stage, "dl.microbatch_id": micro}
        with (self.telemetry.span(G.COMMUNICATION, "megatron.pp.recv_forward.linked", attributes) if linked
              else contextlib.nullcontext()) as linked_span:
            with _otel_managed_span(G.COMMUNICATION, "megatron.p2p.recv_forward"), self.telemetry.phase("wait"):
                activation = torch.empty(self.activation_shape())
                dist.recv(activation, self.previous_rank, tag=FORWARD)
            if self.telemetry.active:  # the sender's context travels with every activation
                carrier = torch.empty(26)
                dist.recv(carrier, self.previous_rank, tag=FORWARD_CONTEXT)
                sender = context_of(carrier)
                if linked_span is not None and sender is not None:
                    linked_span.add_link(sender)
        return activation

    def recv_backward(self):
        if self.model.last:
            return None
        with _otel_managed_span(G.COMMUNICATION, "megatron.p2p.recv_backward"), self.telemetry.phase("wait"):
            grad = torch.empty(self.activation_shape())
            dist.recv(grad, self.next_rank, tag=BACKWARD)
            return grad

    def send_forward(self, output):
        if self.model.last:
            return
        with _otel_managed_span(G.COMMUNICATION, "megatron.p2p.send_forward") as send:
            self.pending_sends.append(dist.isend(output.detach(), self.next_rank, tag=FORWARD))
            if self.telemetry.active:  # no span (its group off): 26 zero bytes, which carry no context
                carrier = context_tensor(send.get_span_context()) if send is not None else torch.zeros(26)
                self.pending_sends.append(dist.isend(carrier, self.next_rank, tag=FORWARD_CONTEXT))

    def send_backward(self, grad):
        if self.model.first:
            return
        with _otel_managed_span(G.COMMUNICATION, "megatron.p2p.send_backward"):
            self.pending_sends.append(dist.isend(grad, self.previous_rank, tag=BACKWARD))

    def forward_step(self, micro, received, data, stream, keep_graph):
        with _otel_managed_span(G.MICROBATCH, "megatron.microbatch.forward", **{"megatron.microbatch_id": micro}), \
                self.telemetry.phase("compute"):
            tokens = batch_of(data, self.args, self.iteration, micro, stream)
            if self.model.first:
                inputs = tokens[:, :-1]
            else:
                inputs = received.requires_grad_(True) if keep_graph else received
            output = self.model(inputs)
            loss = F.cross_entropy(output.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1)) if self.model.last else None
            return inputs, output, loss

    def backward_step(self, micro, output, loss, output_grad):
        with _otel_managed_span(G.MICROBATCH, "megatron.microbatch.backward", **{"megatron.microbatch_id": micro}), \
                self.telemetry.phase("compute"):
            self.tp.backward_pass = True  # the tensor-parallel all-reduces from here are the backward's
            try:
                if self.model.last:
                    (loss / self.args.microbatches).backward()
                else:
                    output.backward(output_grad)
            finally:
                self.tp.backward_pass = False

    def train_step(self, segment):
        """One iteration: 1F1B over the micro-batches, gradient sync, the optimizer (megatron/training/training.py)."""
        args, iteration = self.args, self.iteration + 1
        options = {}
        if self.telemetry.step_layout:
            from lens import step_trace_id
            options = {"trace_id": step_trace_id(self.telemetry.handle.run_id, iteration), "links": [segment]}
        with self.telemetry.span(G.STEP, self.names["train_step"], {"megatron.iteration": iteration, **GOODPUT},
                                 **options) as step:
            for p in self.model.parameters():
                p.grad = None
            loss_sum = torch.zeros(())
            warmup = min(args.pipeline_model_parallel_size - args.stage - 1, args.microbatches)
            steady = args.microbatches - warmup
            in_flight = []
            counts = {"forward": 0}

            def run_forward(received):
                micro = counts["forward"]
                inputs, output, loss = self.forward_step(micro, received, self.corpus[0], 0, True)
                nonlocal loss_sum
                if loss is not None:
                    loss_sum = loss_sum + loss.detach()
                self.send_forward(output)
                in_flight.append((micro, inputs, output, loss))
                counts["forward"] += 1

            def run_backward(output_grad):
                micro, inputs, output, loss = in_flight.pop(0)
                self.backward_step(micro, output, loss, output_grad)
                if not self.model.first:
                    self.send_backward(inputs.grad)

            with _otel_managed_span(G.FORWARD_BACKWARD, self.names["forward_backward"],
                                    **{self.names["num_microbatches_key"]: args.microbatches}):
                for _ in range(warmup):
                    run_forward(self.recv_forward(counts["forward"], True))
                for i in range(steady):
                    run_forward(self.recv_forward(counts["forward"], warmup == 0 and i == 0))
                    run_backward(self.recv_backward())
                for _ in range(warmup):
                    run_backward(self.recv_backward())
                for work in self.pending_sends:
                    work.wait()
                self.pending_sends.clear()
            self.sync_gradients()
            with _otel_managed_span(G.OPTIMIZER, self.names["optimizer_step"]) as optimizer_span:
                grad_norm = self.clip_and_norm()
                learning_rate = self.learning_rate()
                for group in self.optimizer.param_groups:
                    group["lr"] = learning_rate
                self.optimizer.step()
                if optimizer_span is not None:
                    optimizer_span.set_attributes({"megatron.grad_norm": grad_norm, "megatron.update_successful": True})
            loss = loss_sum / args.microbatches
            dist.broadcast(loss, self.last_stage_rank, group=self.pipeline)
            dist.all_reduce(loss, group=self.data)
            loss = loss.item() / args.data_parallel_size
            self.iteration += 1
            if step is not None:
                step.set_attributes({"megatron.loss": loss, "megatron.grad_norm": grad_norm})
                if self.telemetry.names["train_step"] != DOCUMENTED_NAMES["train_step"]:
                    step.set_attribute("megatron.skipped", False)
        return loss, grad_norm, learning_rate

    def sync_gradients(self):
        """Averages the gradients over the data-parallel replicas (megatron/core/distributed)."""
        if self.args.data_parallel_size == 1:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.model.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads])
        with _otel_managed_span(G.COMMUNICATION, "megatron.grad_sync.start"):
            work = dist.all_reduce(flat, group=self.data, async_op=True)
        with _otel_managed_span(G.COMMUNICATION, "megatron.grad_sync.finish"), self.telemetry.phase("wait"):
            work.wait()
        flat /= self.args.data_parallel_size
        offset = 0
        for p, g in zip(self.model.parameters(), grads):
            p.grad = flat[offset:offset + g.numel()].view_as(g).clone()
            offset += g.numel()

    def clip_and_norm(self):
        """The global gradient norm (every stage and tensor-parallel rank; a parameter each tensor-parallel rank holds
        whole counted on the first only, as Megatron counts it), then clipping to --clip-grad."""
        counted_elsewhere = {id(p) for p in self.duplicates} if self.args.tensor_rank > 0 else set()
        squares = torch.zeros(())
        for p in self.model.parameters():
            if p.grad is not None and id(p) not in counted_elsewhere:
                squares = squares + p.grad.pow(2).sum()
        if self.args.tensor_model_parallel_size > 1:
            dist.all_reduce(squares, group=self.tp.group)
        dist.all_reduce(squares, group=self.pipeline)
        norm = math.sqrt(squares.item())
        if self.args.clip_grad > 0 and norm > self.args.clip_grad:
            for p in self.model.parameters():
                if p.grad is not None:
                    p.grad.mul_(self.args.clip_grad / (norm + 1e-6))
        return norm

    def learning_rate(self):
        a, it = self.args, self.iteration
        if a.lr_warmup_iters > 0 and it < a.lr_warmup_iters:
            return a.lr * (it + 1) / a.lr_warmup_iters
        if a.lr_decay_style == "constant" or a.train_iters <= a.lr_warmup_iters:
            return a.lr
        progress = (it - a.lr_warmup_iters) / (a.train_iters - a.lr_warmup_iters)
        decay = 1 - progress if a.lr_decay_style == "linear" else 0.5 * (1 + math.cos(math.pi * progress))
        return a.min_lr + (a.lr - a.min_lr) * max(0.0, decay)

    def evaluate_step(self, step):
        with _otel_managed_span(G.EVALUATE, "megatron.evaluate.step", **{"megatron.eval_iteration": step + 1}):
            return self.evaluate_batches(step)

    def evaluate_batches(self, step):
        loss_sum = torch.zeros(())
        for micro in range(self.args.microbatches):
            received = None
            if not self.model.first:
                received = torch.empty(self.activation_shape())
                dist.recv(received, self.previous_rank, tag=FORWARD)
            _, output, loss = self.forward_step(micro, received, self.corpus[1], 1 + step, False)
            if loss is not None:
                loss_sum += loss
            if not self.model.last:
                dist.send(output, self.next_rank, tag=FORWARD)
        return loss_sum

    @_otel_trace_fn(G.EVALUATE, "megatron.evaluate")
    def evaluate(self):
        with torch.no_grad():
            loss = sum(self.evaluate_step(e) for e in range(self.args.eval_iters)) / (
                self.args.eval_iters * self.args.microbatches)
            loss = torch.as_tensor(loss, dtype=torch.float32)
            dist.broadcast(loss, self.last_stage_rank, group=self.pipeline)
            dist.all_reduce(loss, group=self.data)
        # Megatron's: the attribute on the span the decorator started, through the OpenTelemetry API (a
        # non-recording span when the group is off or nothing is installed).
        try:
            from opentelemetry import trace as _ot
            _ot.get_current_span().set_attribute("megatron.eval_iters", self.args.eval_iters)
        except Exception:  # noqa: BLE001: telemetry must never break evaluation
            pass
        return loss.item() / self.args.data_parallel_size

    # checkpoints (megatron/training/checkpointing.py): each stage's first replica writes its file (one a
    # tensor-parallel rank: mp_rank_<tensor rank>_<stage>), rank 0 the tracker
    def stage_file(self, root, iteration):
        name = f"mp_rank_{self.args.tensor_rank:02d}_{self.args.stage:03d}"
        return pathlib.Path(root) / f"iter_{iteration:07d}" / name / "model_optim_rng.pt"

    def save_checkpoint(self, root):
        with _otel_managed_span(G.CHECKPOINT, self.names["save_checkpoint"],
                                **{"megatron.iteration": self.iteration, **GOODPUT}):
            tag_current_span_call_idx(self.iteration)
            if self.args.data_rank == 0:
                with _otel_managed_span(G.CHECKPOINT, self.names["save_checkpoint_state_dict"], **self.part_goodput):
                    state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                             "iteration": self.iteration}
                with _otel_managed_span(G.CHECKPOINT, self.names["save_checkpoint_io_write"], **self.part_goodput):
                    path = self.stage_file(root, self.iteration)
                    with _otel_managed_span(G.TRACE_REGION, "checkpoint.mkdir"):
                        path.parent.mkdir(parents=True, exist_ok=True)
                    with _otel_managed_span(G.TRACE_REGION, "checkpoint.write_file"):
                        torch.save(state, str(path) + ".tmp")
                        os.replace(str(path) + ".tmp", path)
            dist.barrier()
            if self.args.rank == 0:
                with _otel_managed_span(G.TRACE_REGION, "checkpoint.tracker"):
                    tracker = pathlib.Path(root) / "latest_checkpointed_iteration.txt"
                    tracker.with_suffix(".tmp").write_text(f"{self.iteration}\n")
                    os.replace(tracker.with_suffix(".tmp"), tracker)

    def load_checkpoint(self, root):
        tracker = pathlib.Path(root) / "latest_checkpointed_iteration.txt"
        if not tracker.exists():
            return False
        saved = int(tracker.read_text())
        with _otel_managed_span(G.LOAD_CHECKPOINT, self.names["load_checkpoint"],
                                **{"megatron.iteration": saved, **GOODPUT}):
            with _otel_managed_span(G.LOAD_CHECKPOINT, self.names["load_checkpoint_io_read"], **self.part_goodput):
                state = torch.load(self.stage_file(root, saved))
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.iteration = state["iteration"]
        return True


# --- the run ----------------------------------------------------------------------------------------------------

STOP = {"requested": False}


def agree_before_iteration(telemetry, iteration):
    """What every rank must agree on before `iteration`, in one small all-reduce (MAX), as the C++ trainer does:
    whether any rank was asked to stop (SIGTERM), and the span-group change rank 0's control endpoint took (`lens
    ctl`), applied at the same iteration everywhere. The boundary is also the heartbeat of lens's hang watchdog and
    of lens.progress.*. True when the ranks stop."""
    request = telemetry.span_group_request()
    words = torch.tensor([1 if STOP["requested"] else 0, *request], dtype=torch.int64)
    dist.all_reduce(words, op=dist.ReduceOp.MAX)
    if words[0].item() > 0:
        return True
    telemetry.at_iteration_boundary(iteration, words[1:].tolist())
    return False


def peak_memory_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB on Linux


class TorchProfiler:
    """Megatron's --profile --use-pytorch-profiler on the ranks of --profile-ranks: torch.profiler over iterations
    [--profile-step-start, --profile-step-end), its trace written as <--tensorboard-dir>/rank<R>.pt.trace.json with
    Kineto's time base (baseTimeNanoseconds, each ts in microseconds after it), which a PyTorch without Kineto leaves
    out of the file; `lens convert --merge` lines it up with lens's spans of the rank."""

    def __init__(self, args):
        self.args = args
        self.on = args.profile and args.use_pytorch_profiler and args.rank in args.profile_ranks
        self.profile = None

    def before_iteration(self, iteration):
        if self.on and self.profile is None and iteration == self.args.profile_step_start:
            self.profile = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            self.profile.__enter__()

    def after_iteration(self, iteration):
        if self.profile is not None and iteration >= self.args.profile_step_end - 1:
            self.finish()

    def finish(self):
        if self.profile is None:
            return
        self.profile.__exit__(None, None, None)
        os.makedirs(self.args.tensorboard_dir, exist_ok=True)
        path = os.path.join(self.args.tensorboard_dir, f"rank{self.args.rank}.pt.trace.json")
        self.profile.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
        if isinstance(trace, list) or "baseTimeNanoseconds" not in trace:
            results = self.profile.profiler.kineto_results
            start_ns = results.trace_start_ns() if hasattr(results, "trace_start_ns") else \
                results.trace_start_us() * 1000
            events = trace if isinstance(trace, list) else trace.get("traceEvents", [])
            with open(path, "w") as f:
                json.dump({"displayTimeUnit": "ms", "baseTimeNanoseconds": start_ns, "traceEvents": events}, f)
        self.profile, self.on = None, False
        log.info(" torch.profiler trace of rank %d: %s", self.args.rank, path)


class IterationLog:
    """Megatron's log line and training metrics every --log-interval iterations; SPAN_NAMES=megatron, inside its
    report spans, every iteration (its training_log runs every iteration)."""

    def __init__(self, args, telemetry, prints):
        self.args, self.telemetry, self.prints = args, telemetry, prints
        self.start, self.iterations = time.perf_counter(), 0

    def after(self, it, loss, grad_norm, learning_rate):
        self.iterations += 1
        megatron_tree = self.telemetry.megatron_tree
        with (self.telemetry.attached_span(G.STEP, "megatron.train.iteration_report", GOODPUT)
              if megatron_tree else contextlib.nullcontext()), \
                (_otel_managed_span(G.STEP, "megatron.train.log", **GOODPUT)
                 if megatron_tree else contextlib.nullcontext()):
            if it % self.args.log_interval == 0 or it == self.args.train_iters:
                self.log(it, loss, grad_norm, learning_rate)

    def log(self, it, loss, grad_norm, learning_rate):
        args = self.args
        seconds = (time.perf_counter() - self.start) / self.iterations
        tokens_per_sec = args.global_batch_size * args.seq_length / seconds
        tflops = flops_per_iteration(args) / seconds / 1e12 / args.world_size
        self.telemetry.record_metrics(step_duration_ms=1000 * seconds, loss=loss, throughput_tflops=tflops,
                                      grad_norm=grad_norm, skipped_iters=0, learning_rate=learning_rate,
                                      tokens_per_sec=tokens_per_sec, memory_allocated_gb=peak_memory_gb())
        if self.prints:
            line = (f" iteration {it:8d}/{args.train_iters:8d} | learning rate: {learning_rate:.3E} | "
                    f"lm loss: {loss:.6E} | grad norm: {grad_norm:.3f} | "
                    f"elapsed time per iteration (ms): {1000 * seconds:.1f}")
            if args.log_throughput:
                line += f" | tokens/s: {tokens_per_sec:.0f} | TFLOP/s: {tflops:.4f}"
            log.info(line)
        self.start, self.iterations = time.perf_counter(), 0


def exposed_save(telemetry, trainer, root):
    """A checkpoint; SPAN_NAMES=megatron, inside Megatron's megatron.checkpoint.exposed_save (its cost to the loop)."""
    with (telemetry.attached_span(G.CHECKPOINT, "megatron.checkpoint.exposed_save",
                                  {"megatron.iteration": trainer.iteration, **GOODPUT})
          if telemetry.megatron_tree else contextlib.nullcontext()):
        trainer.save_checkpoint(root)


def main(argv=None):
    main_entry_ns = time.time_ns()
    args = parse_args(argv)
    args_parsed_ns = time.time_ns()
    log.setLevel(logging.INFO)  # the trainer's lines on stdout; other loggers keep logging's defaults
    log.addHandler(logging.StreamHandler(sys.stdout))
    signal.signal(signal.SIGTERM, lambda *_: STOP.update(requested=True))
    torch.set_num_threads(1)  # ranks share the machine's cores
    telemetry = Telemetry(args)
    dist.init_process_group("gloo", rank=args.rank, world_size=args.world_size)
    telemetry.set_up(args, shared_run_id(telemetry))
    initialized_ns = time.time_ns()
    SimulatedGpu.open(args.testing_fake_cuda, args.testing_kernel_us)
    prints = args.rank == args.world_size - 1
    megatron_tree = telemetry.megatron_tree
    pretrain_attributes = {"megatron.model_type": "gpt", "megatron.train_iters": args.train_iters,
                           "megatron.global_batch_size": args.global_batch_size, **GOODPUT}
    # Documented names: megatron.pretrain spans the run. SPAN_NAMES=megatron, as today's Megatron-LM: no run-long
    # span; megatron.startup, the root of a trace of its own, spans startup from the first line of this file.
    with (contextlib.nullcontext() if megatron_tree else
          telemetry.attached_span(G.JOB, "megatron.pretrain", pretrain_attributes)) as pretrain:
        with (telemetry.attached_span(G.JOB, "megatron.startup", {"megatron.model_type": "gpt", **GOODPUT}, root=True,
                                      start_time=PROGRAM_START_NS)
              if megatron_tree else contextlib.nullcontext()) as startup:
            if startup is not None:  # Megatron's back-dated phases, those this trainer has
                telemetry.backdated_span(G.JOB, "megatron.startup.imports", PROGRAM_START_NS, main_entry_ns)
                telemetry.backdated_span(G.JOB, "megatron.startup.arg_parse", main_entry_ns, args_parsed_ns)
                telemetry.backdated_span(G.JOB, "megatron.startup.initialize_megatron", args_parsed_ns, initialized_ns)
            with _otel_managed_span(G.DATA_LOADING, telemetry.names["data_loading"], **GOODPUT):
                with _otel_managed_span(G.TRACE_REGION, "dataset.read_text"):
                    corpus = load_corpus(args.data_path)
            with _otel_managed_span(G.MODEL_INIT, telemetry.names["model_init"], **GOODPUT):
                trainer = Trainer(args, telemetry, corpus)
            if args.load and trainer.load_checkpoint(args.load) and args.rank == 0:
                log.info(" loaded checkpoint from %s at iteration %d", args.load, trainer.iteration)
        startup_context = startup.get_span_context() if startup is not None else None
        pretrain_context = pretrain.get_span_context() if pretrain is not None else None
        previous_segment, first_iteration, stopped = None, True, False
        last_loss, valid_loss = float("nan"), -1.0
        iteration_log = IterationLog(args, telemetry, prints)
        profiler = TorchProfiler(args)
        while trainer.iteration < args.train_iters and not stopped:
            # A trace segment per --save-interval: the first is pretrain's child, each later one a new trace linked
            # to pretrain and to the one before (CONTRACT §6). SPAN_NAMES=megatron: each a new trace linked to the
            # one before, the first to startup.
            if megatron_tree:
                links, root = [previous_segment or startup_context], True
            else:
                links = [pretrain_context, previous_segment] if previous_segment is not None else None
                root = previous_segment is not None
            with telemetry.attached_span(G.JOB, "megatron.train", {"megatron.train_iters": args.train_iters,
                                                                   **GOODPUT},
                                         root=root, links=links) as segment:
                segment_context = segment.get_span_context() if segment is not None else None
                end = args.train_iters
                if args.save_interval > 0:
                    end = min(args.train_iters, (trainer.iteration // args.save_interval + 1) * args.save_interval)
                while trainer.iteration < end:
                    if agree_before_iteration(telemetry, trainer.iteration + 1):
                        stopped = True
                        break
                    sibling = telemetry.started_span(G.FIRST_ITERATION, "megatron.train.first_iteration",
                                                     {"megatron.iteration": trainer.iteration + 1, **GOODPUT}) \
                        if first_iteration else None
                    profiler.before_iteration(trainer.iteration + 1)
                    last_loss, grad_norm, learning_rate = trainer.train_step(segment_context)
                    profiler.after_iteration(trainer.iteration)
                    if sibling is not None:
                        sibling.end()
                    first_iteration = False
                    it = trainer.iteration
                    if telemetry.end_step(it):
                        found = telemetry.gather_stragglers(it, args)
                        for rank in (found or {}).get("flagged", []) if segment is not None else []:
                            verdict = next(r for r in found["ranks"] if r["rank"] == rank)
                            segment.add_event("lens.straggler", {"dl.rank": rank,
                                                                 "dl.pipeline_parallel.rank": verdict["stage"],
                                                                 "dl.tensor_parallel.rank": verdict["tensor_rank"],
                                                                 "lens.straggler.score": verdict["score"],
                                                                 "megatron.iteration": found["iteration"]})
                    iteration_log.after(it, last_loss, grad_norm, learning_rate)
                    if args.eval_interval > 0 and it % args.eval_interval == 0:
                        valid_loss = trainer.evaluate()
                        if prints:
                            log.info(" validation loss at iteration %d: %.6E", it, valid_loss)
                    if args.save and args.save_interval > 0 and it % args.save_interval == 0:
                        exposed_save(telemetry, trainer, args.save)
            previous_segment = segment_context
        profiler.finish()
        if stopped and args.save:
            exposed_save(telemetry, trainer, args.save)
        if not stopped and valid_loss < 0:
            valid_loss = trainer.evaluate()
        if prints:
            log.info(" done: %d iterations, last training loss %.4f, validation loss %.4f%s", trainer.iteration,
                     last_loss, valid_loss, " (stopped by SIGTERM)" if stopped else "")
        dist.barrier()
    telemetry.shutdown()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
