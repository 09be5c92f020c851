// The trainer's logger: spdlog, with each line written to stdout as it always was (the message alone, flushed)
// and handed to lens's sink, so that with LOGS_ENABLED=1 every line the trainer writes (iteration lines,
// validation loss, warnings) is a log record carrying the current trace and span ids. Installed as spdlog's
// default logger, so any part of the trainer logs with spdlog::info / spdlog::warn.
//
//   trainer::install_logger();
//   spdlog::info(" validation loss at iteration {}: {:.6E}", iteration, loss);
#pragma once

namespace trainer {

void install_logger();

}  // namespace trainer
