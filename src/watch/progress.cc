#include "watch/progress.h"

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "common/clock.h"
#include "hang/snapshot.h"
#include "lens/metrics.h"
#include "watch/step_watch.h"

namespace lens::internal {

namespace {

// A gauge written straight into its instrument: these values are taken inside a collection, which may be the
// last one of a shutdown that has already turned recording off for the application (metrics::Gauge::record would
// drop them, and the final export would say the job stopped short of its last iterations).
struct CollectionGauge {
  Instrument* instrument;
  CollectionGauge(std::string_view name, std::string_view unit, std::string_view description, bool integer)
      : instrument(find_or_create_instrument(name, unit, description, InstrumentKind::kGauge, integer, {})) {}
  void set(std::int64_t v) const noexcept { record(instrument, v); }
  void set(double v) const noexcept { record(instrument, v); }
};

// The share of wall time since setup spent in steps: what the job knows of its goodput as it runs (`lens report`
// says where the rest went, and counts restarts and redone iterations).
void record_goodput() {
  const StepTimeTotals t = step_time_totals();
  if (t.steps == 0) return;
  static const CollectionGauge in_steps("lens.goodput.step_time", "s", "Seconds spent in training steps since setup.",
                                        false);
  static const CollectionGauge wall("lens.goodput.wall_time", "s", "Seconds since telemetry setup.", false);
  static const CollectionGauge ratio("lens.goodput.ratio", "",
                                     "Share of the wall time since setup spent in training steps.", false);
  const double wall_s = static_cast<double>(steady_nanos() - t.setup_steady_ns) / 1e9;
  const double steps_s = static_cast<double>(t.in_steps_ns) / 1e9;
  in_steps.set(steps_s);
  wall.set(wall_s);
  ratio.set(wall_s > 0 ? steps_s / wall_s : 0.0);
}

}  // namespace

void record_progress() noexcept {
  const IterationProgress p = iteration_progress();
  if (p.boundary_nanos == 0) return;
  try {
    record_goodput();
    static const CollectionGauge iteration("lens.progress.iteration", "",
                                           "The last training iteration completed (0: none yet).", true);
    static const CollectionGauge since("lens.progress.since_last_iteration", "s",
                                       "Seconds since the last iteration boundary, at collection.", false);
    // The boundary is before p.iteration starts; lens::end_step says when a step ended (the last one too).
    iteration.set(std::max(p.iteration - 1, step_time_totals().last_iteration));
    since.set(static_cast<double>(steady_nanos() - p.boundary_nanos) / 1e9);
  } catch (...) {  // no memory for the instruments: no heartbeat this time
  }
}

}  // namespace lens::internal
