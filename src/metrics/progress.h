// The progress heartbeat (CONTRACT §8): the last completed iteration and the seconds since the last iteration
// boundary, taken at each collection, so a hung training thread shows in Prometheus without a signal.
#pragma once

namespace lens::internal {

// Records lens.progress.iteration and lens.progress.since_last_iteration from the boundaries
// lens::at_iteration_boundary noted; nothing before the first one.
void record_progress() noexcept;

}  // namespace lens::internal
