// The progress heartbeat (CONTRACT §8): the last completed iteration and the seconds since the last iteration
// boundary, taken at each collection, so a hung training thread shows in Prometheus without a signal; and the
// share of wall time spent in steps (lens.goodput.*).
#pragma once

namespace lens::internal {

// Records lens.progress.iteration, lens.progress.since_last_iteration and lens.goodput.* from the boundaries
// lens::at_iteration_boundary noted and the steps lens::end_step closed; nothing before the first boundary.
void record_progress() noexcept;

}  // namespace lens::internal
