// scale_rank: one rank of a lens-only job, for bench/scale.sh: what a training rank asks of lens, without LibTorch.
// The run id is agreed through a real rendezvous (rank 0 serves it over TCP at MASTER_ADDR:MASTER_PORT, as
// pretrain_gpt's store does), the resource is the one pretrain_gpt sends (lens::megatron::resource_provider), and each
// iteration records what pretrain_gpt's does under the same span groups, at a set pace: a step with its
// forward-backward, micro-batches, pipeline transfers (the receive linked to the previous stage's send), gradient
// sync and optimizer; the training metrics and a log record every --log-interval iterations.
//
//   RANK=3 WORLD_SIZE=256 MASTER_ADDR=127.0.0.1 MASTER_PORT=29600 MEGATRON_OTEL_ENABLED=1 ...
//       scale_rank ITERATIONS ITERATION_MS [PIPELINE_SIZE]
//
// Telemetry comes from the environment (MEGATRON_OTEL_*, OTEL_*). The last line of stdout is JSON: the rank, the
// milliseconds to agree on the run id and to set telemetry up (from the process's start), and lens's counts.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "lens/log.h"
#include "lens/megatron.h"
#include "lens/resource.h"
#include "lens/telemetry.h"

namespace mg = lens::megatron::group;
using Clock = std::chrono::steady_clock;

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

sockaddr_in master_address() {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(env_int("MASTER_PORT", 29600)));
  const char* host = std::getenv("MASTER_ADDR");
  if (::inet_pton(AF_INET, host && *host ? host : "127.0.0.1", &a.sin_addr) != 1)
    throw std::runtime_error("MASTER_ADDR is not an IPv4 address");
  return a;
}

void write_all(int fd, const std::string& text) {
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) throw std::runtime_error("rendezvous: a rank left before it was told the run id");
    done += static_cast<std::size_t>(n);
  }
}

// Rank 0 tells every other rank its run id; the others ask until it answers (60 s).
std::string agree_on_run_id(int rank, int world_size, const std::string& own_id) {
  const sockaddr_in address = master_address();
  if (rank == 0) {
    const int server = ::socket(AF_INET, SOCK_STREAM, 0);
    const int yes = 1;
    ::setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(server, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 || ::listen(server, 4096) != 0)
      throw std::runtime_error("rendezvous: cannot listen at MASTER_ADDR:MASTER_PORT");
    for (int answered = 1; answered < world_size; ++answered) {
      const int peer = ::accept(server, nullptr, nullptr);
      if (peer < 0) throw std::runtime_error("rendezvous: accept failed");
      write_all(peer, own_id + "\n");
      ::close(peer);
    }
    ::close(server);
    return own_id;
  }
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < until) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
      std::string id;
      char c = 0;
      while (::read(fd, &c, 1) == 1 && c != '\n') id += c;
      ::close(fd);
      if (!id.empty()) return id;
    } else {
      ::close(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error("rendezvous: rank 0 did not answer within 60 s");
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

struct Shape {
  int rank, world_size, pipeline_size, stage;
  static constexpr int kMicrobatches = 4, kLayers = 2;
};

// One iteration as pretrain_gpt records it (1F1B order simplified: the spans and their groups are what matters).
void iteration(const Shape& s, std::int64_t it, lens::SpanContext& last_send) {
  LENS_SPAN_NAMED(step, mg::step, "megatron.train_step", {"megatron.iteration", it}, {"megatron.loss", 3.0},
                  lens::megatron::kGoodput);
  {
    LENS_SPAN(mg::forward_backward, "megatron.forward_backward", {"megatron.num_microbatches", Shape::kMicrobatches});
    for (int mb = 0; mb < Shape::kMicrobatches; ++mb) {
      if (s.stage > 0) {
        LENS_SPAN_NAMED(linked, mg::communication, "megatron.pp.recv_forward.linked",
                        {"dl.pipeline_parallel.rank", s.stage}, {"dl.microbatch_id", mb});
        if (last_send.is_valid()) linked.add_link(last_send);
        LENS_SPAN(mg::communication, "megatron.p2p.recv_forward");
      }
      {
        LENS_SPAN(mg::microbatch, "megatron.microbatch.forward", {"megatron.microbatch_id", mb});
        for (int layer = 0; layer < Shape::kLayers; ++layer) {
          LENS_SPAN(mg::layer, "megatron.layer.forward", {"megatron.layer", layer});
        }
      }
      if (s.stage + 1 < s.pipeline_size) {
        LENS_SPAN_NAMED(send, mg::communication, "megatron.p2p.send_forward");
        last_send = send.context();
      }
      LENS_SPAN(mg::microbatch, "megatron.microbatch.backward", {"megatron.microbatch_id", mb});
    }
    LENS_SPAN(mg::communication, "megatron.grad_sync.finish");
  }
  LENS_SPAN(mg::optimizer, "megatron.optimizer_step");
}

}  // namespace

int main(int argc, char** argv) {
  const auto started = Clock::now();
  if (argc < 3) {
    std::fprintf(stderr, "usage: scale_rank ITERATIONS ITERATION_MS [PIPELINE_SIZE]\n");
    return 2;
  }
  const std::int64_t iterations = std::atoll(argv[1]);
  const int iteration_ms = std::atoi(argv[2]);
  Shape s{.rank = env_int("RANK", 0),
          .world_size = env_int("WORLD_SIZE", 1),
          .pipeline_size = argc > 3 ? std::atoi(argv[3]) : 2,
          .stage = 0};
  s.stage = s.rank / std::max(1, s.world_size / std::max(1, s.pipeline_size));
  try {
    lens::Config config = lens::megatron::config_from_env();
    config.run_id = agree_on_run_id(s.rank, s.world_size, lens::resolve_run_id(config));
    const double agreed_ms = ms_since(started);
    const lens::megatron::TrainingArgs args{.local_rank = env_int("LOCAL_RANK", s.rank),
                                            .tensor_model_parallel_size = 1,
                                            .pipeline_model_parallel_size = s.pipeline_size,
                                            .data_parallel_size = s.world_size / std::max(1, s.pipeline_size),
                                            .global_batch_size = 64,
                                            .seq_length = 16,
                                            .num_layers = Shape::kLayers,
                                            .hidden_size = 16,
                                            .num_attention_heads = 2,
                                            .train_iters = iterations,
                                            .micro_batch_size = 1,
                                            .ckpt_format = "torch_dist",
                                            .fp16 = false,
                                            .bf16 = false};
    lens::Telemetry telemetry = lens::setup_telemetry(
        config,
        {.rank = s.rank, .world_size = s.world_size, .resource_provider = lens::megatron::resource_provider(args)});
    const double setup_ms = ms_since(started);
    lens::SpanContext last_send{};
    auto next = Clock::now();
    for (std::int64_t it = 1; it <= iterations; ++it) {
      iteration(s, it, last_send);
      if (it % 10 == 0) {
        lens::megatron::record_training_metrics({.step_duration_ms = static_cast<double>(iteration_ms),
                                                 .loss = 3.0,
                                                 .throughput_tflops = 1.0,
                                                 .grad_norm = 1.0,
                                                 .skipped_iters = std::int64_t{0},
                                                 .learning_rate = 1e-3,
                                                 .tokens_per_sec = 1000.0,
                                                 .memory_allocated_gb = 0.1});
        lens::log(lens::Severity::kInfo, "iteration done", {{"megatron.iteration", it}});
      }
      next += std::chrono::milliseconds(iteration_ms);
      std::this_thread::sleep_until(next);
    }
    telemetry.shutdown();
    const lens::SpanStats stats = telemetry.span_stats();
    std::printf(
        "{\"rank\": %d, \"agree_ms\": %.3f, \"setup_ms\": %.3f, \"produced\": %llu, \"exported\": %llu, "
        "\"dropped\": %llu}\n",
        s.rank, agreed_ms, setup_ms, static_cast<unsigned long long>(stats.produced),
        static_cast<unsigned long long>(stats.exported), static_cast<unsigned long long>(stats.dropped()));
  } catch (const lens::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scale_rank %d: %s\n", s.rank, e.what());
    return 1;
  }
  return 0;
}
