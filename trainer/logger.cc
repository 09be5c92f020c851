#include "logger.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>

#include "lens/spdlog_sink.h"

namespace trainer {

void install_logger() {
  auto console = std::make_shared<spdlog::sinks::stdout_sink_mt>();
  console->set_pattern("%v");  // the line as Megatron prints it: log readers and the tests parse it
  auto logger = std::make_shared<spdlog::logger>(
      "pretrain_gpt", spdlog::sinks_init_list{console, std::make_shared<lens::SpdlogSink>()});
  logger->set_level(spdlog::level::info);
  logger->flush_on(spdlog::level::info);  // a line is out before a SIGKILL can lose it
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace trainer
