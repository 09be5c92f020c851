// lens's own diagnostics, on stderr, prefixed "lens: ". Warnings of one kind are rate-limited so a collector
// that is down cannot flood a training log.
#pragma once

namespace lens::internal {

void log_info(const char* format, ...) __attribute__((format(printf, 1, 2)));
// At most one line per distinct format string every 10 seconds; the rest are counted and the count reported.
void log_warning(const char* format, ...) __attribute__((format(printf, 1, 2)));
// Not limited: once per setup (what a setup could not do, said each time it happens).
void log_setup_warning(const char* format, ...) __attribute__((format(printf, 1, 2)));
// The same as log_warning, limited per (format, source): each exporter channel, say, gets its own budget.
void log_warning_from(const void* source, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace lens::internal
