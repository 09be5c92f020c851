#include "metrics/progress.h"

#include "common/clock.h"
#include "hang/snapshot.h"
#include "lens/metrics.h"

namespace lens::internal {

void record_progress() noexcept {
  const IterationProgress p = iteration_progress();
  if (p.boundary_nanos == 0) return;
  try {
    static auto iteration = metrics::gauge<std::int64_t>(
        "lens.progress.iteration", {.description = "The last training iteration completed (0: none yet)."});
    static auto since = metrics::gauge<double>(
        "lens.progress.since_last_iteration",
        {.description = "Seconds since the last iteration boundary, at collection.", .unit = "s"});
    iteration.record(p.iteration - 1);  // the boundary is before p.iteration starts
    since.record(static_cast<double>(steady_nanos() - p.boundary_nanos) / 1e9);
  } catch (...) {  // no memory for the instruments: no heartbeat this time
  }
}

}  // namespace lens::internal
