// Must not compile: compiled out with LENS_DISABLED, an attribute naming nothing is still an error.
#define LENS_DISABLED
#include "lens/span.h"

void misuse() { LENS_SPAN(lens::group::step, "x", {"v", undeclared_name}); }
