// Must not compile: a catalogue has at most 64 groups, so a constant with id 64 is rejected at compile time.
#include "lens/groups.h"

inline constexpr lens::SpanGroup kTooFar{64};
