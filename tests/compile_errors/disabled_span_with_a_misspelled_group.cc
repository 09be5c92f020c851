// Must not compile: compiled out with LENS_DISABLED, a span's arguments are still checked, so a misspelled group
// is an error there too (it used to compile, and broke only the build with telemetry in).
#define LENS_DISABLED
#include "lens/span.h"

void misuse() { LENS_SPAN(lens::group::stpe, "x"); }
