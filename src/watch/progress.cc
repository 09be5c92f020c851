#include "watch/progress.h"

#include <algorithm>

#include "common/clock.h"
#include "hang/snapshot.h"
#include "lens/metrics.h"
#include "watch/step_watch.h"

namespace lens::internal {

namespace {

// The share of wall time since setup spent in steps: what the job knows of its goodput as it runs (`lens report`
// says where the rest went, and counts restarts and redone iterations).
void record_goodput() {
  const StepTimeTotals t = step_time_totals();
  if (t.steps == 0) return;
  static auto in_steps = metrics::gauge<double>(
      "lens.goodput.step_time", {.description = "Seconds spent in training steps since setup.", .unit = "s"});
  static auto wall =
      metrics::gauge<double>("lens.goodput.wall_time", {.description = "Seconds since telemetry setup.", .unit = "s"});
  static auto ratio = metrics::gauge<double>(
      "lens.goodput.ratio", {.description = "Share of the wall time since setup spent in training steps."});
  const double wall_s = static_cast<double>(steady_nanos() - t.setup_steady_ns) / 1e9;
  const double steps_s = static_cast<double>(t.in_steps_ns) / 1e9;
  in_steps.record(steps_s);
  wall.record(wall_s);
  ratio.record(wall_s > 0 ? steps_s / wall_s : 0);
}

}  // namespace

void record_progress() noexcept {
  const IterationProgress p = iteration_progress();
  if (p.boundary_nanos == 0) return;
  try {
    record_goodput();
    static auto iteration = metrics::gauge<std::int64_t>(
        "lens.progress.iteration", {.description = "The last training iteration completed (0: none yet)."});
    static auto since = metrics::gauge<double>(
        "lens.progress.since_last_iteration",
        {.description = "Seconds since the last iteration boundary, at collection.", .unit = "s"});
    // The boundary is before p.iteration starts; lens::end_step says when a step ended (the last one too).
    iteration.record(std::max(p.iteration - 1, step_time_totals().last_iteration));
    since.record(static_cast<double>(steady_nanos() - p.boundary_nanos) / 1e9);
  } catch (...) {  // no memory for the instruments: no heartbeat this time
  }
}

}  // namespace lens::internal
