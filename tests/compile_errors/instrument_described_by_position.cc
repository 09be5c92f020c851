// Must not compile: an instrument's description and unit are named (OpenTelemetry orders them description,
// unit; lens once took unit, description), so passing them by position, where a swap goes unseen, is an error.
#include "lens/metrics.h"

void misuse() { (void)lens::metrics::counter<long>("trainer.steps", "Steps run.", "{step}"); }
