// Must not compile: a span group is a named constant, never a bare integer. The test expects the
// self-explaining message of the static_assert in lens/groups.h.
#include "lens/groups.h"

bool misuse() { return lens::is_enabled(3); }
