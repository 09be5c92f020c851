// lens/resource.h: run identity and the resource every exported item carries (CONTRACT §5).
//
// The run id is shared by every rank of a job without communication: MYTRAINER_OTEL_RUN_ID / NEMO_LENS_RUN_ID,
// else SLURM_JOB_ID, else the launcher's job id (torchrun's TORCHELASTIC_RUN_ID unless `none`, the OpenMPI/PMIx
// job namespace), else 12 random hex digits (then broadcast rank 0's). The job and run uuids are UUIDv5 values
// that every rank and the checkpoint worker derive alike from the SLURM and torchelastic environment.
//
//   lens::RunUuids ids = lens::run_uuids();            // nemo.lens.job_uuid / nemo.lens.run_uuid
//   std::optional<lens::GpuIdentity> gpu = lens::detect_gpu_identity(local_rank);   // NVML, never an error
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "lens/config.h"
#include "lens/internal/visibility.h"
#include "lens/telemetry.h"

namespace lens {

struct RunUuids {
  std::string job_uuid;                                   // stable across restarts and requeues of one job
  std::string run_uuid;                                   // changes with every restart
  std::optional<std::string> torchelastic_restart_count;  // when TORCHELASTIC_RESTART_COUNT is set
};

struct GpuIdentity {
  int index = 0;
  std::string name, uuid, serial, pci_bus_id;
};

#if !defined(LENS_DISABLED)

// The run id setup would use: config.run_id (<PREFIX>_RUN_ID), else SLURM_JOB_ID, else the launcher's job id,
// else 12 random hex digits drawn now. Where the launcher gives none (torchrun without --rdzv_id, ranks started
// by hand), call it on rank 0, send the value to every rank (a store, a broadcast) and set it as config.run_id
// before setup, so that every rank shares it:
//
//   if (rank == 0) store.set("run_id", lens::resolve_run_id(config));
//   config.run_id = store.get("run_id");
LENS_API std::string resolve_run_id(const Config& config);

// UUIDv5 (SHA-1) of `name` in the URL namespace 6ba7b811-9dad-11d1-80b4-00c04fd430c8, in canonical text.
LENS_API std::string uuid5_url(std::string_view name);

// From SLURM_CLUSTER_NAME, SLURM_JOB_ID, SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID, SLURM_RESTART_COUNT and
// TORCHELASTIC_RESTART_COUNT, exactly as CONTRACT §5 says.
LENS_API RunUuids run_uuids();

// The GPU of a local rank through NVML, loaded at run time (libnvidia-ml.so.1, or the library that
// LENS_NVML_LIBRARY names). The device is CUDA_VISIBLE_DEVICES[local_rank] when that entry is numeric, else
// local_rank; a UUID or MIG entry, a missing library or symbol, or any NVML error gives nullopt, never an error.
LENS_API std::optional<GpuIdentity> detect_gpu_identity(int local_rank);

// What setup detects about where the process runs, the detected part of every resource: host.name, process.pid,
// host.gpu.count (CUDA_VISIBLE_DEVICES, else NVML), slurm.* under SLURM, k8s.* under Kubernetes.
LENS_API ResourceAttributes detect_resource();

#else  // LENS_DISABLED: header-only no-ops; nothing is read from the environment, NVML is never loaded.

inline std::string resolve_run_id(const Config& config) { return config.run_id; }
inline std::string uuid5_url(std::string_view) { return {}; }
inline RunUuids run_uuids() { return {}; }
inline std::optional<GpuIdentity> detect_gpu_identity(int) { return std::nullopt; }
inline ResourceAttributes detect_resource() { return {}; }

#endif

}  // namespace lens
