// The ceiling on the enabled set, owned by setup: only an exporting rank with traces on may enable groups.
#pragma once

#include "lens/groups.h"

namespace lens::internal {

// Sets what set_enabled_span_groups() may enable, and the enabled set itself.
void install_span_groups(GroupSet ceiling, GroupSet enabled) noexcept;

}  // namespace lens::internal
