// Run identity and the resource every exported item carries (CONTRACT §5), over an injectable environment.
#pragma once

#include <optional>
#include <string>

#include "config/env.h"
#include "lens/config.h"
#include "lens/ranks.h"
#include "lens/resource.h"
#include "lens/telemetry.h"
#include "signals/exporter.h"

namespace lens::internal {

// P_RUN_ID / F_RUN_ID (in config.run_id), else SLURM_JOB_ID, else an id every rank of the job derives alike
// from the launcher (TORCHELASTIC_RUN_ID unless `none`, the OpenMPI/PMIx job namespace), else 12 random hex
// digits (then only this process has it: the consumer should broadcast rank 0's).
std::string resolve_run_id(const Config& config, const EnvLookup& env);

RunUuids run_uuids_from(const EnvLookup& env);

// CUDA_VISIBLE_DEVICES[local_rank] when numeric, else local_rank; nullopt for a UUID or MIG entry or a rank
// beyond the list.
std::optional<int> gpu_index_for(const EnvLookup& env, int local_rank);
std::optional<GpuIdentity> detect_gpu_identity_from(const EnvLookup& env, int local_rank);

// Parses OTEL_RESOURCE_ATTRIBUTES (`k=v,k2=v2`, percent-decoded). A malformed value is reported (a warning
// that names the variable, not its content) and ignored whole, as the specification says.
ResourceAttributes parse_resource_attributes(const std::string& raw);

// In CONTRACT §5's order, later wins: (1) lens keys, (2) the consumer's attributes, (3) detected keys (host,
// process, host.gpu.count, SLURM, Kubernetes); then (4) OTEL_RESOURCE_ATTRIBUTES fills keys still missing.
Resource build_resource(const Config& config, const RankInfo& ranks, const std::string& run_id,
                        const ResourceAttributes& consumer, const EnvLookup& env);

}  // namespace lens::internal
