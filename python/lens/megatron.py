"""The Megatron-LM extension, from Python: the same catalogue, names, resource and metrics as <lens/megatron.h>.

    from lens.megatron import MegatronSpanGroup, config_from_env, build_telemetry_resource_attrs
    config = config_from_env()                    # MEGATRON_OTEL_*, NEMO_LENS_* fallback, service megatron-lm
    handle = setup_telemetry(config, rank=rank, world_size=world,
                             resource_attributes=build_telemetry_resource_attrs(args))
    record_training_metrics(handle.meter, loss=2.31, grad_norm=0.8, learning_rate=3e-4)

MegatronSpanGroup is taken whole from the C++ catalogue (16 groups, Megatron's presets), so Python and C++ code in
one process name the same groups by the same ids.
"""

from lens import _native
from lens.config import NemoLensConfig
from lens.groups import SpanGroup

ENV_PREFIX = "MEGATRON_OTEL"
FALLBACK_ENV_PREFIX = "NEMO_LENS"
DEFAULT_SERVICE_NAME = "megatron-lm"


def _catalogue_class(name, base, description):
    groups, presets = description
    namespace = {group.upper(): group for group in groups if not hasattr(base, group.upper())}
    namespace["ALL_GROUPS"] = frozenset(groups)
    namespace["_PRESETS"] = {preset: frozenset(members) for preset, members in presets}
    namespace["__doc__"] = "Megatron-LM's span groups: the base 8 and 8 more; presets default, per_step, all."
    return type(name, (base,), namespace)


MegatronSpanGroup = _catalogue_class("MegatronSpanGroup", SpanGroup, _native.megatron_catalogue())

# The training-metric keywords of record_training_metrics (megatron.training.<keyword>).
TRAINING_METRICS = ("step_duration_ms", "loss", "throughput_tflops", "grad_norm", "skipped_iters", "learning_rate",
                    "tokens_per_sec", "memory_allocated_gb", "mfu")

# A GPU's peak dense BF16/FP16 TFLOP/s by NVML's device name, or None (fp32 training, or a GPU not in the table):
# megatron.training.mfu = throughput_tflops / peak (docs/GPU.md).
peak_tflops = _native.peak_tflops

# What build_telemetry_resource_attrs reads from Megatron's arguments (an argparse.Namespace or a dict).
TRAINING_ARGS = ("local_rank", "tensor_model_parallel_size", "pipeline_model_parallel_size", "data_parallel_size",
                 "global_batch_size", "seq_length", "num_layers", "hidden_size", "num_attention_heads",
                 "train_iters", "micro_batch_size", "ckpt_format", "fp16", "bf16",
                 # lens's addition: the rank's place (Megatron's parallel_state ranks), for dl.*_parallel.rank; all
                 # three or none.
                 "tensor_model_parallel_rank", "pipeline_model_parallel_rank", "data_parallel_rank")

GOODPUT = {"is_goodput_span": True}


def config_from_env():
    """NemoLensConfig.from_env with the Megatron prefix, the NEMO_LENS fallback, `megatron-lm` and
    MegatronSpanGroup: what lens::megatron::config_from_env() gives in C++."""
    return NemoLensConfig.from_env(prefix=ENV_PREFIX, fallback_prefix=FALLBACK_ENV_PREFIX,
                                   span_group_cls=MegatronSpanGroup, default_service_name=DEFAULT_SERVICE_NAME)


def record_training_metrics(meter=None, **values):
    """Records one log interval's megatron.training.* metrics (CONTRACT §8); a keyword left out or None is not
    recorded. An unknown keyword raises TypeError."""
    unknown = sorted(set(values) - set(TRAINING_METRICS))
    if unknown:
        raise TypeError(f"record_training_metrics: unknown keyword(s) {', '.join(unknown)}; valid: "
                        f"{', '.join(TRAINING_METRICS)}")
    _native.record_training_metrics(values)


def build_telemetry_resource_attrs(args):
    """The Megatron resource attributes (dl.*, megatron.*, the GPU identity, the SLURM copies, the job and run
    uuids) from Megatron's arguments: the same function as the C++ trainer's. Touches NVML: call it only where
    telemetry is enabled."""
    get = args.get if isinstance(args, dict) else lambda key, default=None: getattr(args, key, default)
    return _native.megatron_resource_attributes({key: get(key, None) for key in TRAINING_ARGS})


resource_attributes = build_telemetry_resource_attrs


def span_names(mode="documented"):
    """The names SPAN_NAMES renames (CONTRACT §6): 'documented' or 'megatron' (Megatron-LM's exported names)."""
    return _native.megatron_span_names(mode)
