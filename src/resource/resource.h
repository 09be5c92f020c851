// Run identity and the resource every exported item carries (SPEC §5).
#pragma once

#include <string>

#include "config/env.h"
#include "export/exporter.h"
#include "lens/config.h"
#include "lens/ranks.h"
#include "lens/telemetry.h"

namespace lens::internal {

// P_RUN_ID / F_RUN_ID (in config.run_id), else SLURM_JOB_ID, else an id every rank of the job derives alike
// from the launcher (TORCHELASTIC_RUN_ID unless `none`, the OpenMPI/PMIx job namespace), else 12 random hex
// digits (then only this process has it: the consumer should broadcast rank 0's).
std::string resolve_run_id(const Config& config, const EnvLookup& env);

// The lens keys, then the consumer's attributes (later wins).
Resource build_resource(const Config& config, const RankInfo& ranks, const std::string& run_id,
                        const ResourceAttributes& consumer, const EnvLookup& env);

}  // namespace lens::internal
