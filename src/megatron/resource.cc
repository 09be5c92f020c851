#include "lens/resource.h"

#include "config/env.h"
#include "lens/megatron.h"
#include "resource/resource.h"

namespace lens::megatron {

ResourceAttributes resource_attributes(const TrainingArgs& a) {
  ResourceAttributes r = {
      {"dl.local_rank", std::int64_t{a.local_rank}},
      {"dl.tensor_parallel.size", std::int64_t{a.tensor_model_parallel_size}},
      {"dl.pipeline_parallel.size", std::int64_t{a.pipeline_model_parallel_size}},
      {"dl.data_parallel.size", std::int64_t{a.data_parallel_size}},
      {"dl.batch_size", a.global_batch_size},
      {"dl.sequence_length", a.seq_length},
      {"megatron.num_layers", std::int64_t{a.num_layers}},
      {"megatron.hidden_size", std::int64_t{a.hidden_size}},
      {"megatron.num_attention_heads", std::int64_t{a.num_attention_heads}},
      {"megatron.train_iters", a.train_iters},
      {"megatron.micro_batch_size", std::int64_t{a.micro_batch_size}},
      {"megatron.ckpt_format", a.ckpt_format},
      {"megatron.precision", std::string(a.fp16   ? "fp16"
                                         : a.bf16 ? "bf16"
                                                  : "fp32")},
  };
  if (a.ranks) {
    r.emplace_back("dl.tensor_parallel.rank", std::int64_t{a.ranks->tensor});
    r.emplace_back("dl.pipeline_parallel.rank", std::int64_t{a.ranks->pipeline});
    r.emplace_back("dl.data_parallel.rank", std::int64_t{a.ranks->data});
  }
  if (std::optional<GpuIdentity> gpu = detect_gpu_identity(a.local_rank)) {
    r.emplace_back("dl.gpu.index", std::int64_t{gpu->index});
    r.emplace_back("dl.gpu.name", gpu->name);
    r.emplace_back("dl.gpu.uuid", gpu->uuid);
    if (!gpu->serial.empty()) r.emplace_back("dl.gpu.serial", gpu->serial);
    r.emplace_back("dl.gpu.pci_bus_id", gpu->pci_bus_id);
  }
  internal::EnvReader env(internal::process_env(), "", "");
  // Copies of the scheduler's and the resiliency extension's identity (CONTRACT §5), when set and not empty.
  for (auto [key, variable] : {std::pair{"slurm.job.id", "SLURM_JOB_ID"},
                               {"slurm.sluid", "LENS_SLURM_SLUID"},
                               {"slurm.cluster", "SLURM_CLUSTER_NAME"},
                               {"slurm.array.job_id", "SLURM_ARRAY_JOB_ID"},
                               {"slurm.array.task_id", "SLURM_ARRAY_TASK_ID"},
                               {"slurm.array.sluid", "LENS_SLURM_ARRAY_SLUID"},
                               {"slurm.restart_count", "SLURM_RESTART_COUNT"},
                               {"nvrx.cycle", "NVRX_CYCLE"},
                               {"nvrx.infra_rank", "NVRX_INFRA_RANK"},
                               {"nvrx.membership", "NVRX_MEMBERSHIP"}}) {
    if (auto v = env.get(variable)) r.emplace_back(key, v->text);
  }
  RunUuids ids = run_uuids();
  r.emplace_back("nemo.lens.job_uuid", ids.job_uuid);
  r.emplace_back("nemo.lens.run_uuid", ids.run_uuid);
  if (ids.torchelastic_restart_count)
    r.emplace_back("slurm.torchelastic.restart_count", *ids.torchelastic_restart_count);
  return r;
}

}  // namespace lens::megatron
