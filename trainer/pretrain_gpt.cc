// pretrain_gpt: a Megatron-style GPT pretraining run, data and pipeline parallel (1F1B), on c10d Gloo, traced by
// lens through its public API only: the span tree of SPEC §6, the training metrics of §8, the Megatron resource of
// §5. Launch with torchrun --no_python, mpirun or srun (rank and world size from their variables).
//
//   torchrun --nproc_per_node 4 --no_python --redirects 9:0 --tee 9:0 build/trainer/pretrain_gpt
//     --pipeline-model-parallel-size 2 --num-layers 4 --train-iters 100 --overlap-grad-reduce
//     --otel-enabled --otel-span-groups all                                        (one command line)
#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "args.h"
#include "checkpoint_worker.h"
#include "gpt.h"
#include "grad_buckets.h"
#include "lens/lens.h"
#include "parallel.h"

namespace {

namespace mg = lens::megatron::group;
using trainer::Args;
using Clock = std::chrono::steady_clock;

std::atomic<bool> g_stop{false};
void request_stop(int) { g_stop.store(true); }

// ---- data ---------------------------------------------------------------------------------------------------

// Byte-level text: the first 90 % trains, the rest evaluates.
struct Corpus {
  std::vector<std::uint8_t> train, valid;
};

Corpus load_corpus(const std::string& data_path) {
  std::string text;
  auto append = [&](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    text.append(std::istreambuf_iterator<char>(in), {});
  };
  if (!data_path.empty()) {
    append(data_path);
  } else {  // the project's own documentation: real English prose, always present
    std::vector<std::filesystem::path> files{std::filesystem::path(LENS_TRAINER_SOURCE_DIR) / "README.md"};
    for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(LENS_TRAINER_SOURCE_DIR) / "docs"))
      if (e.path().extension() == ".md") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) append(f);
  }
  Corpus c;
  const std::size_t split = text.size() * 9 / 10;
  c.train.assign(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(split));
  c.valid.assign(text.begin() + static_cast<std::ptrdiff_t>(split), text.end());
  return c;
}

// Micro-batch `micro` of iteration `iteration` on data-parallel rank `data_rank`: [batch, seq + 1] token ids,
// the same on every stage of a pipeline (stage 0 takes the inputs, the last stage the targets). Deterministic
// in (seed, iteration, rank, micro): a resumed run sees the batches an uninterrupted one would.
torch::Tensor batch_of(const std::vector<std::uint8_t>& data, const Args& a, std::int64_t iteration, int data_rank,
                       std::int64_t micro, std::uint64_t stream) {
  std::seed_seq seq{static_cast<std::uint64_t>(a.seed), static_cast<std::uint64_t>(iteration),
                    static_cast<std::uint64_t>(data_rank), static_cast<std::uint64_t>(micro), stream};
  std::mt19937_64 rng(seq);
  const std::int64_t span = a.seq_length + 1;
  std::uniform_int_distribution<std::size_t> start(0, data.size() - static_cast<std::size_t>(span));
  auto out = torch::empty({a.micro_batch_size, span}, torch::kLong);
  auto* p = out.data_ptr<std::int64_t>();
  for (int b = 0; b < a.micro_batch_size; ++b) {
    const std::size_t at = start(rng);
    for (std::int64_t i = 0; i < span; ++i) *p++ = data[at + static_cast<std::size_t>(i)];
  }
  return out;
}

// ---- the trainer --------------------------------------------------------------------------------------------

class Trainer {
 public:
  Trainer(const Args& args, trainer::Parallel& parallel, const Corpus& corpus, const lens::Telemetry& telemetry,
          lens::ResourceAttributes resource)
      : a_(args),
        par_(parallel),
        t_(parallel.topology()),
        corpus_(corpus),
        telemetry_(telemetry),
        resource_(std::move(resource)),
        microbatches_(trainer::num_microbatches(args, t_.data_parallel_size)),
        config_{args.num_layers, args.hidden_size, args.num_attention_heads, args.seq_length,
                t_.stage(), t_.pipeline_size} {
    torch::manual_seed(static_cast<std::uint64_t>(a_.seed) + static_cast<std::uint64_t>(t_.stage()));
    model_ = trainer::GptStage(config_);
    optimizer_ = std::make_unique<torch::optim::AdamW>(
        model_->parameters(), torch::optim::AdamWOptions(a_.lr).weight_decay(a_.weight_decay));
    grads_ = std::make_unique<trainer::GradBuckets>(
        model_->parameters(), trainer::bucket_elements(a_, t_.data_parallel_size), par_.data(), a_.overlap_grad_reduce);
    if (a_.async_save && saves()) worker_ = std::make_unique<trainer::CheckpointWorker>();
  }

  std::int64_t iteration() const { return iteration_; }
  const trainer::GptConfig& config() const { return config_; }

  // One iteration: forward and backward of every micro-batch (1F1B), gradient sync, optimizer step.
  // Returns the loss averaged over micro-batches and data-parallel ranks (known on every rank).
  struct StepResult {
    double loss, grad_norm, learning_rate;
  };
  StepResult train_step(const lens::SpanContext& iteration_context);
  double evaluate();
  void save_checkpoint(const std::string& dir);
  // --async-save: waits until the files of the last save are written, then records it as the latest.
  void finish_pending_save();
  bool load_checkpoint(const std::string& dir);

 private:
  struct InFlight {
    torch::Tensor input, output, loss;
  };
  InFlight forward(std::int64_t micro, torch::Tensor received, const std::vector<std::uint8_t>& data,
                   std::uint64_t stream, bool keep_graph);
  void backward(std::int64_t micro, InFlight& f, const torch::Tensor& output_grad);
  torch::Tensor recv_forward(std::int64_t micro, const lens::SpanContext* link);
  torch::Tensor recv_backward();
  void send_forward(const torch::Tensor& output);
  void send_backward(const torch::Tensor& input_grad);
  double clip_and_norm();
  double learning_rate() const;
  at::IntArrayRef activation_shape() {
    shape_ = {a_.micro_batch_size, a_.seq_length, a_.hidden_size};
    return shape_;
  }

  const Args& a_;
  trainer::Parallel& par_;
  trainer::Topology t_;
  bool saves() const { return t_.data_rank() == 0; }  // each stage's first replica writes its files
  void write_tracker(std::int64_t iteration);

  const Corpus& corpus_;
  const lens::Telemetry& telemetry_;
  lens::ResourceAttributes resource_;
  std::unique_ptr<trainer::CheckpointWorker> worker_;
  std::int64_t pending_save_ = -1;  // iteration of an async save not yet known written
  std::string dir_;                 // where the last save went
  std::int64_t microbatches_;
  trainer::GptConfig config_;
  trainer::GptStage model_{nullptr};
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::unique_ptr<trainer::GradBuckets> grads_;  // every parameter's .grad lives in these
  std::int64_t iteration_ = 0;
  std::vector<std::int64_t> shape_;
  std::vector<c10::intrusive_ptr<c10d::Work>> pending_sends_;
};

Trainer::InFlight Trainer::forward(std::int64_t micro, torch::Tensor received, const std::vector<std::uint8_t>& data,
                                   std::uint64_t stream, bool keep_graph) {
  LENS_SPAN(mg::microbatch, "megatron.microbatch.forward", {"megatron.microbatch_id", micro});
  InFlight f;
  torch::Tensor tokens;
  if (t_.first_stage() || t_.last_stage()) tokens = batch_of(data, a_, iteration_, t_.data_rank(), micro, stream);
  if (t_.first_stage()) {
    f.input = tokens.slice(1, 0, a_.seq_length);
  } else {
    f.input = keep_graph ? received.requires_grad_(true) : received;
  }
  f.output = model_->forward(f.input);
  if (t_.last_stage()) {
    auto targets = tokens.slice(1, 1, a_.seq_length + 1);
    f.loss = torch::nn::functional::cross_entropy(f.output.reshape({-1, trainer::GptConfig::kVocab}),
                                                  targets.reshape({-1}));
  }
  return f;
}

void Trainer::backward(std::int64_t micro, InFlight& f, const torch::Tensor& output_grad) {
  LENS_SPAN(mg::microbatch, "megatron.microbatch.backward", {"megatron.microbatch_id", micro});
  if (t_.last_stage()) {
    (f.loss / static_cast<double>(microbatches_)).backward();
  } else {
    f.output.backward(output_grad);
  }
}

torch::Tensor Trainer::recv_forward(std::int64_t micro, const lens::SpanContext* link) {
  if (t_.first_stage()) return {};
  auto receive = [&] {
    LENS_SPAN(mg::communication, "megatron.p2p.recv_forward");
    return par_.recv(activation_shape(), -1, trainer::Parallel::kForward);
  };
  if (!link) return receive();
  // The warm-up receives of a non-first stage link to rank 0's iteration context (SPEC §6).
  LENS_SPAN_NAMED(linked, mg::communication, "megatron.pp.recv_forward.linked",
                  {"dl.pipeline_parallel.rank", t_.stage()}, {"dl.microbatch_id", micro});
  if (link->is_valid()) linked.add_link(*link);
  return receive();
}

torch::Tensor Trainer::recv_backward() {
  if (t_.last_stage()) return {};
  LENS_SPAN(mg::communication, "megatron.p2p.recv_backward");
  return par_.recv(activation_shape(), +1, trainer::Parallel::kBackward);
}

// Sends are started, not waited for: the matching receive may come after this rank's own next receive.
void Trainer::send_forward(const torch::Tensor& output) {
  if (t_.last_stage()) return;
  LENS_SPAN(mg::communication, "megatron.p2p.send_forward");
  pending_sends_.push_back(par_.send(output.detach(), +1, trainer::Parallel::kForward));
}

void Trainer::send_backward(const torch::Tensor& input_grad) {
  if (t_.first_stage()) return;
  LENS_SPAN(mg::communication, "megatron.p2p.send_backward");
  pending_sends_.push_back(par_.send(input_grad, -1, trainer::Parallel::kBackward));
}

Trainer::StepResult Trainer::train_step(const lens::SpanContext& iteration_context) {
  grads_->begin_iteration(lens::current_context());
  const int stages = t_.pipeline_size;
  const std::int64_t warmup = std::min<std::int64_t>(stages - t_.stage() - 1, microbatches_);
  const std::int64_t steady = microbatches_ - warmup;
  std::deque<std::pair<std::int64_t, InFlight>> in_flight;
  double loss_sum = 0;
  {
    LENS_SPAN(mg::forward_backward, "megatron.forward_backward", {"megatron.num_microbatches", microbatches_});
    std::int64_t next_forward = 0, next_backward = 0;
    auto run_forward = [&](torch::Tensor received) {
      InFlight f = forward(next_forward, std::move(received), corpus_.train, 0, true);
      if (t_.last_stage()) loss_sum += f.loss.item<double>();
      send_forward(f.output);
      in_flight.emplace_back(next_forward++, std::move(f));
    };
    auto run_backward = [&](const torch::Tensor& output_grad) {
      auto [micro, f] = std::move(in_flight.front());
      in_flight.pop_front();
      if (micro == microbatches_ - 1) grads_->arm();  // its gradients complete the buckets
      backward(micro, f, output_grad);
      ++next_backward;
      if (!t_.first_stage()) send_backward(f.input.grad());
    };
    for (std::int64_t i = 0; i < warmup; ++i) run_forward(recv_forward(next_forward, &iteration_context));
    for (std::int64_t i = 0; i < steady; ++i) {
      run_forward(recv_forward(next_forward, warmup == 0 && i == 0 ? &iteration_context : nullptr));
      run_backward(recv_backward());
    }
    for (std::int64_t i = 0; i < warmup; ++i) run_backward(recv_backward());
    for (auto& w : pending_sends_) w->wait();
    pending_sends_.clear();
  }
  grads_->finish();
  StepResult r{};
  {
    LENS_SPAN_NAMED(step, mg::optimizer, "megatron.optimizer_step");
    r.grad_norm = clip_and_norm();
    r.learning_rate = learning_rate();
    for (auto& group : optimizer_->param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(r.learning_rate);
    optimizer_->step();
    step.set_attributes({{"megatron.grad_norm", r.grad_norm}, {"megatron.update_successful", true}});
  }
  // The loss is known on the last stage: give it to the pipeline, then average over the replicas.
  auto loss = torch::tensor({loss_sum / static_cast<double>(microbatches_)}, torch::kFloat);
  par_.broadcast(par_.pipeline(), loss, stages - 1);
  par_.allreduce(par_.data(), loss);
  r.loss = loss.item<double>() / t_.data_parallel_size;
  ++iteration_;
  return r;
}

// The global gradient norm (all stages; the replicas agree after the sync), then clipping to --clip-grad.
double Trainer::clip_and_norm() {
  auto squares = torch::zeros({1});
  for (auto& p : model_->parameters())
    if (p.grad().defined()) squares += p.grad().pow(2).sum();
  par_.allreduce(par_.pipeline(), squares);
  const double norm = std::sqrt(squares.item<double>());
  if (a_.clip_grad > 0 && norm > a_.clip_grad) {
    const double scale = a_.clip_grad / (norm + 1e-6);
    for (auto& p : model_->parameters())
      if (p.grad().defined()) p.grad().mul_(scale);
  }
  return norm;
}

double Trainer::learning_rate() const {
  const double it = static_cast<double>(iteration_);
  if (a_.lr_warmup_iters > 0 && iteration_ < a_.lr_warmup_iters)
    return a_.lr * (it + 1) / static_cast<double>(a_.lr_warmup_iters);
  if (a_.lr_decay_style == "constant" || a_.train_iters <= a_.lr_warmup_iters) return a_.lr;
  const double progress =
      (it - static_cast<double>(a_.lr_warmup_iters)) / static_cast<double>(a_.train_iters - a_.lr_warmup_iters);
  const double decay = a_.lr_decay_style == "linear" ? 1.0 - progress : 0.5 * (1.0 + std::cos(M_PI * progress));
  return a_.min_lr + (a_.lr - a_.min_lr) * std::max(0.0, decay);
}

double Trainer::evaluate() {
  LENS_SPAN(mg::evaluate, "megatron.evaluate", {"megatron.eval_iters", a_.eval_iters});
  torch::NoGradGuard no_grad;
  double loss_sum = 0;
  for (std::int64_t e = 0; e < a_.eval_iters; ++e) {
    LENS_SPAN(mg::evaluate, "megatron.evaluate.step");
    for (std::int64_t micro = 0; micro < microbatches_; ++micro) {
      torch::Tensor received = t_.first_stage() ? torch::Tensor() : par_.recv(activation_shape(), -1, trainer::Parallel::kForward);
      InFlight f = forward(micro, received, corpus_.valid, 1 + static_cast<std::uint64_t>(e), false);
      if (t_.last_stage()) loss_sum += f.loss.item<double>();
      if (!t_.last_stage()) par_.send(f.output, +1, trainer::Parallel::kForward)->wait();
    }
  }
  auto loss = torch::tensor({loss_sum / static_cast<double>(a_.eval_iters * microbatches_)}, torch::kFloat);
  par_.broadcast(par_.pipeline(), loss, t_.pipeline_size - 1);
  par_.allreduce(par_.data(), loss);
  return loss.item<double>() / t_.data_parallel_size;
}

std::string iteration_dir(const std::string& root, std::int64_t iteration) {
  char name[32];
  std::snprintf(name, sizeof name, "iter_%07lld", static_cast<long long>(iteration));
  return (std::filesystem::path(root) / name).string();
}

std::string stage_file(const std::string& iteration_path, int stage) {
  char name[48];
  std::snprintf(name, sizeof name, "mp_rank_00_%03d", stage);
  return (std::filesystem::path(iteration_path) / name / "model_optim_rng.pt").string();
}

// Each stage's first replica writes its file; the tracker file is written last, by rank 0, after every rank is
// done (a crash mid-save leaves the previous checkpoint as the latest). With --async-save the bytes go to the
// worker process and the tracker is written once the worker says they are in place (at the next save or at
// the end of training).
void Trainer::save_checkpoint(const std::string& dir) {
  finish_pending_save();
  LENS_SPAN_NAMED(save, mg::checkpoint, "megatron.save_checkpoint", {"megatron.iteration", iteration_});
  const std::string path = stage_file(iteration_dir(dir, iteration_), t_.stage());
  if (saves()) {
    torch::serialize::OutputArchive archive, model_archive, optimizer_archive;
    std::ostringstream bytes;
    {
      LENS_SPAN(mg::checkpoint, "megatron.save_checkpoint.state_dict");
      model_->save(model_archive);
      optimizer_->save(optimizer_archive);
      archive.write("model", model_archive);
      archive.write("optimizer", optimizer_archive);
      archive.write("iteration", torch::tensor({iteration_}, torch::kLong));
      archive.save_to(bytes);
    }
    if (worker_) {
      LENS_TRACE_REGION("checkpoint.handoff");
      worker_->submit(lens::build_worker_bootstrap(telemetry_, resource_, save.context()).serialize(), path, bytes.str());
    } else {
      LENS_SPAN(mg::checkpoint, "megatron.save_checkpoint.io_write");
      {
        LENS_TRACE_REGION("checkpoint.mkdir");
        std::filesystem::create_directories(std::filesystem::path(path).parent_path());
      }
      LENS_TRACE_REGION("checkpoint.write_file");
      std::ofstream(path + ".tmp", std::ios::binary) << bytes.str();
      std::filesystem::rename(path + ".tmp", path);
    }
  }
  if (a_.async_save) {
    pending_save_ = iteration_;
    dir_ = dir;
    return;
  }
  par_.barrier();
  dir_ = dir;
  write_tracker(iteration_);
}

void Trainer::finish_pending_save() {
  if (pending_save_ < 0) return;
  const bool written = !worker_ || worker_->wait_written();
  auto ok = torch::tensor({written ? 0.0f : 1.0f});
  std::vector<torch::Tensor> tensors{ok};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::MAX;
  par_.world().allreduce(tensors, options)->wait();
  if (tensors[0].item<float>() == 0) {
    write_tracker(pending_save_);
  } else if (t_.rank == 0) {
    std::fprintf(stderr, "pretrain_gpt: the checkpoint of iteration %lld was not written; the latest stays as it was\n",
                 static_cast<long long>(pending_save_));
  }
  pending_save_ = -1;
}

void Trainer::write_tracker(std::int64_t iteration) {
  if (t_.rank != 0) return;
  LENS_TRACE_REGION("checkpoint.tracker");
  const auto tracker = std::filesystem::path(dir_) / "latest_checkpointed_iteration.txt";
  std::ofstream(tracker.string() + ".tmp") << iteration << "\n";
  std::filesystem::rename(tracker.string() + ".tmp", tracker);
}

bool Trainer::load_checkpoint(const std::string& dir) {
  const auto tracker = std::filesystem::path(dir) / "latest_checkpointed_iteration.txt";
  std::ifstream in(tracker);
  std::int64_t saved = -1;
  if (!(in >> saved)) return false;
  LENS_SPAN(mg::load_checkpoint, "megatron.load_checkpoint", {"megatron.iteration", saved});
  torch::serialize::InputArchive archive, model_archive, optimizer_archive;
  {
    LENS_SPAN(mg::load_checkpoint, "megatron.load_checkpoint.io_read");
    archive.load_from(stage_file(iteration_dir(dir, saved), t_.stage()));
  }
  archive.read("model", model_archive);
  archive.read("optimizer", optimizer_archive);
  model_->load(model_archive);
  optimizer_->load(optimizer_archive);
  torch::Tensor it;
  archive.read("iteration", it);
  iteration_ = it.item<std::int64_t>();
  return true;
}

// ---- telemetry around the run --------------------------------------------------------------------------------

// What the ranks settle together at the start of each iteration, in one small all-reduce (MAX): whether any was
// asked to stop (SIGTERM; so that none waits in a collective for one that has left) and, when telemetry is
// configured, rank 0's current context in its fixed 26-byte binary form (the others contribute zeros), which the
// pipeline receives link to (SPEC §6: every rank takes part whenever telemetry is configured, exporting or not).
struct Agreement {
  bool stop = false;
  lens::SpanContext rank0_context;
};

Agreement agree(trainer::Parallel& par, bool with_context) {
  lens::BinaryContext bytes{};
  const std::int64_t n = 1 + (with_context ? static_cast<std::int64_t>(bytes.size()) : 0);
  auto values = torch::zeros({n});
  auto* v = values.data_ptr<float>();
  v[0] = g_stop.load() ? 1.0f : 0.0f;
  if (with_context && par.topology().rank == 0) {
    bytes = lens::to_binary(lens::current_context());
    for (std::size_t i = 0; i < bytes.size(); ++i) v[1 + i] = bytes[i];
  }
  std::vector<torch::Tensor> tensors{values};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::MAX;
  par.world().allreduce(tensors, options)->wait();
  v = tensors[0].data_ptr<float>();
  Agreement a;
  a.stop = v[0] > 0;
  if (with_context) {
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(v[1 + i]);
    a.rank0_context = lens::from_binary(bytes).value_or(lens::SpanContext{});
  }
  return a;
}

// This CPU trainer's stand-in for the GPU's peak allocated memory: the process's peak resident set.
double peak_memory_gb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0 / 1e9;  // ru_maxrss is in KiB
}

void log_line(const Args& a, std::int64_t iteration, const Trainer::StepResult& r, double ms_per_iteration,
              double tokens_per_sec, double tflops) {
  std::printf(" iteration %8lld/%8lld | learning rate: %.3E | lm loss: %.6E | grad norm: %.3f | "
              "elapsed time per iteration (ms): %.1f",
              static_cast<long long>(iteration), static_cast<long long>(a.train_iters), r.learning_rate, r.loss,
              r.grad_norm, ms_per_iteration);
  if (a.log_throughput) std::printf(" | tokens/s: %.0f | TFLOP/s: %.4f", tokens_per_sec, tflops);
  std::printf("\n");
  std::fflush(stdout);
}

int run(const Args& args) {
  lens::RankInfo ranks = lens::detect_rank_info();
  const int dp = trainer::validate(args, ranks.world_size);
  trainer::Topology topology{ranks.rank, ranks.world_size, args.pipeline_model_parallel_size, dp};

  std::signal(SIGTERM, request_stop);  // before lens: its handler flushes telemetry, then calls this one
  lens::Config config = lens::megatron::config_from_env();
  config.apply_cli(args.otel_enabled, args.otel_service_name, args.otel_span_groups);
  // A bad span-group spec fails every rank here, before the rendezvous (where rank 0 leaving early would break
  // the others' connection to its store).
  if (config.enabled) lens::resolve(config.catalogue, config.span_groups, config.span_groups_source);
  // One run id on every rank: rank 0's, through the rendezvous store (the launcher may give none).
  auto store = trainer::make_store(topology);
  if (ranks.rank == 0) {
    const std::string id = lens::resolve_run_id(config);
    store->set("lens/run_id", std::vector<std::uint8_t>(id.begin(), id.end()));
  }
  const std::vector<std::uint8_t> shared_id = store->get("lens/run_id");
  config.run_id.assign(shared_id.begin(), shared_id.end());
  lens::megatron::TrainingArgs training{ranks.local_rank, args.tensor_model_parallel_size,
                                        args.pipeline_model_parallel_size, dp, args.global_batch_size,
                                        args.seq_length, args.num_layers, args.hidden_size,
                                        args.num_attention_heads, args.train_iters, args.micro_batch_size,
                                        args.ckpt_format, args.fp16, args.bf16};
  lens::Telemetry telemetry = lens::setup_telemetry(
      config, ranks.rank, ranks.world_size, {},
      lens::SetupOptions{.local_rank = ranks.local_rank, .resource_provider = lens::megatron::resource_provider(training)});
  const bool telemetry_on = config.enabled;
  torch::set_num_threads(1);  // ranks share the machine's cores

  double final_train_loss = 0, last_eval = -1;
  {
    LENS_SPAN_NAMED(pretrain, mg::job, "megatron.pretrain", {"megatron.model_type", "gpt"},
                    {"megatron.train_iters", args.train_iters}, {"megatron.global_batch_size", args.global_batch_size});
    std::unique_ptr<trainer::Parallel> parallel;
    std::unique_ptr<Trainer> trainer;
    Corpus corpus;
    {
      LENS_SPAN(mg::data_loading, "megatron.data_loading");
      LENS_TRACE_REGION("dataset.read_text");
      corpus = load_corpus(args.data_path);
    }
    {
      LENS_SPAN(mg::model_init, "megatron.model_init");
      parallel = std::make_unique<trainer::Parallel>(topology, store);
      // The worker's resource comes from the same function as this rank's (built only where it is exported).
      lens::ResourceAttributes resource =
          telemetry.is_exporting() ? lens::megatron::resource_attributes(training) : lens::ResourceAttributes{};
      trainer = std::make_unique<Trainer>(args, *parallel, corpus, telemetry, std::move(resource));
    }
    if (!args.load.empty() && trainer->load_checkpoint(args.load) && ranks.rank == 0)
      std::printf(" loaded checkpoint from %s at iteration %lld\n", args.load.c_str(),
                  static_cast<long long>(trainer->iteration()));

    const lens::SpanContext pretrain_context = pretrain.context();
    const trainer::GptConfig& model = trainer->config();
    const bool prints = ranks.rank == ranks.world_size - 1;  // Megatron logs on the last rank
    bool first = true;
    auto interval_start = Clock::now();
    std::int64_t interval_iterations = 0;
    lens::SpanContext previous_segment;
    bool stopping = false;
    while (trainer->iteration() < args.train_iters && !stopping) {
      // One trace segment per save interval (the whole run without one): the first is pretrain's child, each
      // later one a new trace linked to pretrain and to the segment before.
      const bool later_segment = previous_segment.is_valid();
      lens::ScopedSpan segment;
      if (LENS_GROUP_ENABLED(mg::job))
        segment.start(mg::job, "megatron.train", {{"megatron.train_iters", args.train_iters}},
                      {.root = later_segment});
      if (later_segment) {
        segment.add_link(pretrain_context);
        segment.add_link(previous_segment);
      }
      const std::int64_t segment_end =
          args.save_interval > 0 ? std::min(args.train_iters, (trainer->iteration() / args.save_interval + 1) * args.save_interval)
                                 : args.train_iters;
      while (trainer->iteration() < segment_end) {
        const Agreement agreement = agree(*parallel, telemetry_on);
        if ((stopping = agreement.stop)) break;
        const lens::SpanContext& iteration_context = agreement.rank0_context;
        lens::Span first_iteration;
        if (first && LENS_GROUP_ENABLED(mg::first_iteration))
          first_iteration.start(mg::first_iteration, "megatron.train.first_iteration",
                                {{"megatron.iteration", trainer->iteration() + 1}});
        Trainer::StepResult r;
        {
          LENS_SPAN_NAMED(step, mg::step, "megatron.train_step", {"megatron.iteration", trainer->iteration() + 1});
          r = trainer->train_step(iteration_context);
          step.set_attributes({{"megatron.loss", r.loss}, {"megatron.grad_norm", r.grad_norm}});
        }
        first_iteration.end();
        first = false;
        final_train_loss = r.loss;
        ++interval_iterations;
        const std::int64_t it = trainer->iteration();
        if (it % args.log_interval == 0 || it == args.train_iters) {
          const double seconds = std::chrono::duration<double>(Clock::now() - interval_start).count();
          const double per_iteration = seconds / static_cast<double>(interval_iterations);
          const double tokens_per_sec = static_cast<double>(args.global_batch_size * args.seq_length) / per_iteration;
          const double tflops = trainer::flops_per_iteration(model, args.global_batch_size) / per_iteration /
                                1e12 / ranks.world_size;
          lens::megatron::record_training_metrics({.step_duration_ms = 1000.0 * per_iteration,
                                                   .loss = r.loss,
                                                   .throughput_tflops = tflops,
                                                   .grad_norm = r.grad_norm,
                                                   .skipped_iters = std::int64_t{0},
                                                   .learning_rate = r.learning_rate,
                                                   .tokens_per_sec = tokens_per_sec,
                                                   .memory_allocated_gb = peak_memory_gb()});
          if (lens::should_log(lens::Severity::kInfo))
            lens::log(lens::Severity::kInfo, "training progress", {{"megatron.iteration", it}, {"megatron.loss", r.loss}});
          if (prints) log_line(args, it, r, 1000.0 * per_iteration, tokens_per_sec, tflops);
          interval_start = Clock::now();
          interval_iterations = 0;
        }
        if (args.eval_interval > 0 && it % args.eval_interval == 0) {
          last_eval = trainer->evaluate();
          if (prints) std::printf(" validation loss at iteration %lld: %.6E\n", static_cast<long long>(it), last_eval);
        }
        if (args.save_interval > 0 && it % args.save_interval == 0) trainer->save_checkpoint(args.save);
      }
      previous_segment = segment.context();
    }
    if (stopping && !args.save.empty()) trainer->save_checkpoint(args.save);
    trainer->finish_pending_save();
    if (!stopping && last_eval < 0) last_eval = trainer->evaluate();
    if (prints)
      std::printf(" done: %lld iterations, last training loss %.4f, validation loss %.4f%s\n",
                  static_cast<long long>(trainer->iteration()), final_train_loss, last_eval,
                  stopping ? " (stopped by SIGTERM)" : "");
    parallel->barrier();
  }
  telemetry.shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string_view(argv[1]) == "--checkpoint-worker") return trainer::run_checkpoint_worker();
  try {
    return run(trainer::parse_args(argc, argv));
  } catch (const trainer::ArgsError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const lens::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pretrain_gpt: %s\n", e.what());
    return 1;
  }
}
