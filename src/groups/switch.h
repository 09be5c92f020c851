// The ceiling on the enabled set, owned by setup: only an exporting rank with traces on may enable groups.
#pragma once

#include <atomic>

#include "lens/groups.h"

namespace lens::internal {

// Sets what set_enabled_span_groups() may enable, the enabled set itself, and the groups whose spans are kept as
// positions for hang snapshots whatever the enabled set (their sites run, as LENS_GROUP_ENABLED checks
// g_recorded_group_bits: enabled | positions; a span of a group that is not enabled lives only in its thread's slot
// while open, with no ids, no context and no export).
// `sampler_records` false (a sampler that drops every span, sampling/build.h): the enabled set is kept, reported and
// changed as usual, but no span site of an enabled group runs, so its spans cost what a disabled group's do (positions
// are still kept).
void install_span_groups(GroupSet ceiling, GroupSet enabled, GroupSet positions = {},
                         bool sampler_records = true) noexcept;
// Nothing recorded (a signal ends the process, a fork's child).
void clear_span_groups() noexcept;

}  // namespace lens::internal
