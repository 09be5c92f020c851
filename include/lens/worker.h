// lens/worker.h: telemetry for a helper process of a training rank (CONTRACT §9), such as a checkpoint writer.
//
// The rank builds a bootstrap and hands it to the worker (a pipe, a file, an environment variable); the worker
// sets telemetry up from it and so reports with the rank's service name, span groups, rank, run id and
// resource, and exports exactly when its rank does. The bootstrap also carries a span context (a lens
// addition): the worker links its spans to the span that asked for the work.
//
//   // the rank, inside megatron.save_checkpoint:
//   std::string text = lens::build_worker_bootstrap(telemetry, resource).serialize();
//   // the worker, from that text:
//   lens::WorkerBootstrap boot = lens::WorkerBootstrap::parse(text);
//   lens::Telemetry t = lens::setup_worker_telemetry(boot, lens::megatron::config_from_env());
//   lens::Span write(lens::group::checkpoint, "nvrx.checkpoint.save.write");
//   write.add_link(boot.link);
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lens/config.h"
#include "lens/context.h"
#include "lens/internal/visibility.h"
#include "lens/span.h"
#include "lens/telemetry.h"

namespace lens {

LENS_ABI_NAMESPACE_BEGIN

struct LENS_API WorkerBootstrap {
  bool enabled = false;  // the rank exports telemetry
  std::string service_name;
  std::string span_groups;                        // the spec the rank was configured with
  std::vector<std::string> resolved_span_groups;  // the groups it resolved to, in catalogue order
  int rank = 0, world_size = 1;
  std::string run_id;
  ResourceAttributes resource_attrs;  // the consumer's attributes (the same function as the rank's)
  SpanContext link;                   // the span the worker's spans link to (invalid: none)

  // Text of `key=value` lines with %XX escapes: safe in a pipe, a file or an environment variable.
  std::string serialize() const;
  // Reads serialize()'s text; throws ConfigError naming the line of anything malformed.
  static WorkerBootstrap parse(std::string_view text);
};

#if !defined(LENS_DISABLED)

// The bootstrap of this rank's setup. `link` defaults to the calling thread's current span.
LENS_API WorkerBootstrap build_worker_bootstrap(const Telemetry& telemetry, ResourceAttributes resource_attrs,
                                                const SpanContext& link = current_context());

// Sets the worker's telemetry up: `config` (its exporter and other settings, e.g. from the environment) with the
// bootstrap's service name, span groups, run id and on/off, for the bootstrap's rank and world size, with its
// resource attributes. Replaces a live setup of this process. A helper never takes its rank's place: it serves no
// control endpoint and writes no hang snapshot (whatever `config` says), and it ignores the hang signal
// (ignore_hang_signal_in_helper) so that a signal sent to the whole job does not end it.
LENS_API Telemetry setup_worker_telemetry(const WorkerBootstrap& bootstrap, Config config);

// Sets `hang_signal` (Config::hang_signal: SIGUSR1 by default, 0 for none) to be ignored in this process where it
// has no handler: a helper that has not set telemetry up yet (or never will) survives a signal meant for the ranks.
// Call it first thing in a helper process; to cover the time before (a helper that loads large libraries takes a
// while), start it with the signal blocked (posix_spawnattr_setsigmask) and unblock it after this call: a signal
// that came meanwhile is then dropped (pretrain_gpt's checkpoint worker does so).
LENS_API void ignore_hang_signal_in_helper(int hang_signal) noexcept;

#else  // LENS_DISABLED: header-only no-ops.

inline std::string WorkerBootstrap::serialize() const { return {}; }
inline void ignore_hang_signal_in_helper(int) noexcept {}
inline WorkerBootstrap WorkerBootstrap::parse(std::string_view) { return {}; }
inline WorkerBootstrap build_worker_bootstrap(const Telemetry&, ResourceAttributes, const SpanContext& = {}) {
  return {};
}
inline Telemetry setup_worker_telemetry(const WorkerBootstrap&, Config) { return {}; }

#endif

LENS_ABI_NAMESPACE_END

}  // namespace lens
