#include "trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <thread>

namespace trainer {

namespace mg = lens::megatron::group;

Trainer::InFlight Trainer::forward(std::int64_t micro, const torch::Tensor& received,
                                   const std::vector<std::uint8_t>& data, std::uint64_t stream, bool keep_graph) {
  LENS_SPAN(mg::microbatch, "megatron.microbatch.forward", {"megatron.microbatch_id", micro});
  LENS_STEP_PHASE(lens::StepPhase::kCompute);  // kept whatever groups are on (lens/straggler.h)
  if (topology_.rank == args_.testing_slow_rank && iteration_ + 1 >= args_.testing_slow_from)
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(args_.testing_slow_ms));  // iterations done
  if (micro == 1) stall_if(keep_graph ? "forward" : "evaluate");
  InFlight f;
  torch::Tensor tokens;
  if (topology_.first_stage() || topology_.last_stage())
    tokens = batch_of(data, args_, iteration_, topology_.data_rank(), micro, stream);
  if (topology_.first_stage()) {
    f.input = tokens.slice(1, 0, args_.seq_length);
  } else {
    f.input = keep_graph ? received.requires_grad_(true) : received;
  }
  f.output = model_->forward(f.input);
  if (topology_.last_stage()) {
    auto targets = tokens.slice(1, 1, args_.seq_length + 1);
    f.loss =
        torch::nn::functional::cross_entropy(f.output.reshape({-1, trainer::GptConfig::kVocab}), targets.reshape({-1}));
  }
  return f;
}

void Trainer::stall_if(std::string_view point) const {
  if (topology_.rank != args_.testing_slow_rank || point != args_.testing_stall_in) return;
  // iteration_ counts the iterations done: the one running in training, the one just done in its evaluation.
  const std::int64_t iteration = point == "evaluate" ? iteration_ : iteration_ + 1;
  while (iteration == args_.testing_stall_iteration) std::this_thread::sleep_for(std::chrono::hours(1));
}

void Trainer::backward(std::int64_t micro, InFlight& f, const torch::Tensor& output_grad) {
  LENS_SPAN(mg::microbatch, "megatron.microbatch.backward", {"megatron.microbatch_id", micro});
  LENS_STEP_PHASE(lens::StepPhase::kCompute);
  const trainer::BackwardPass pass;  // the tensor-parallel all-reduces from here are the backward's
  if (micro == 1) stall_if("backward");
  if (topology_.last_stage()) {
    (f.loss / static_cast<double>(microbatches_)).backward();
  } else {
    f.output.backward(output_grad);
  }
}

namespace {

// A span context as 26 floats (its binary form, a byte each: exact in a float), the dtype the stages exchange.
torch::Tensor context_tensor(const lens::SpanContext& context) {
  const lens::BinaryContext bytes = lens::to_binary(context);
  torch::Tensor t = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kFloat);
  float* v = t.data_ptr<float>();
  for (std::size_t i = 0; i < bytes.size(); ++i) v[i] = bytes[i];
  return t;
}

lens::SpanContext context_of(const torch::Tensor& t) {
  lens::BinaryContext bytes{};
  const float* v = t.data_ptr<float>();
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(v[i]);
  return lens::from_binary(bytes).value_or(lens::SpanContext{});
}

}  // namespace

// Starts `span` as one end of the transfer `key` (PeerLinks): in the step layout its id is derived from the end,
// and it links to the other end's span on the peer rank.
void Trainer::start_transfer(lens::ScopedSpan& span, lens::SpanName name, const std::string& key,
                             std::string_view end) const {
  if (!LENS_GROUP_ENABLED(mg::communication)) return;
  const lens::SpanId id = peer_links_.id(key + "/" + std::string(end));
  span.start(mg::communication, name, {}, {.span_id = &id});
  if (end == "recv")
    peer_links_.link_to_sender(span, key + "/send");
  else
    peer_links_.link_to_peers(span, {key + "/recv"});
}

torch::Tensor Trainer::recv_forward(std::int64_t micro, bool linked) {
  if (topology_.first_stage()) return {};
  // The warm-up receives link to the sending stage's megatron.p2p.send_forward, whose context arrives with the
  // activation (CONTRACT §6): a micro-batch can be followed from stage to stage.
  LENS_SPAN_NAMED_IF(linked_span, linked, mg::communication, "megatron.pp.recv_forward.linked",
                     {"dl.pipeline_parallel.rank", topology_.stage()}, {"dl.microbatch_id", micro});
  torch::Tensor activation;
  {
    lens::ScopedSpan recv;
    start_transfer(recv, "megatron.p2p.recv_forward",
                   PeerLinks::transfer("forward", micro, previous_rank(), topology_.rank), "recv");
    LENS_STEP_PHASE(lens::StepPhase::kWait);
    activation = parallel_.recv(activation_shape(), -1, trainer::Parallel::kForward);
  }
  if (carries_contexts()) {
    const lens::SpanContext sender =
        context_of(parallel_.recv({lens::BinaryContext{}.size()}, -1, trainer::Parallel::kForwardContext));
    if (sender.is_valid()) linked_span.add_link(sender);
  }
  return activation;
}

torch::Tensor Trainer::recv_backward(std::int64_t micro) {
  if (topology_.last_stage()) return {};
  lens::ScopedSpan recv;
  start_transfer(recv, "megatron.p2p.recv_backward",
                 PeerLinks::transfer("backward", micro, next_rank(), topology_.rank), "recv");
  LENS_STEP_PHASE(lens::StepPhase::kWait);
  return parallel_.recv(activation_shape(), +1, trainer::Parallel::kBackward);
}

// Sends are started, not waited for: the matching receive may come after this rank's own next receive.
void Trainer::send_forward(std::int64_t micro, const torch::Tensor& output) {
  if (topology_.last_stage()) return;
  lens::ScopedSpan send;
  start_transfer(send, "megatron.p2p.send_forward", PeerLinks::transfer("forward", micro, topology_.rank, next_rank()),
                 "send");
  pending_sends_.push_back(parallel_.send(output.detach(), +1, trainer::Parallel::kForward));
  if (carries_contexts())
    pending_sends_.push_back(parallel_.send(context_tensor(send.context()), +1, trainer::Parallel::kForwardContext));
}

void Trainer::send_backward(std::int64_t micro, const torch::Tensor& input_grad) {
  if (topology_.first_stage()) return;
  lens::ScopedSpan send;
  start_transfer(send, "megatron.p2p.send_backward",
                 PeerLinks::transfer("backward", micro, topology_.rank, previous_rank()), "send");
  pending_sends_.push_back(parallel_.send(input_grad, -1, trainer::Parallel::kBackward));
}

Trainer::StepResult Trainer::train_step(const lens::SpanContext& segment,
                                        const std::optional<lens::SpanGroupChange>& change) {
  // TRACE_LAYOUT=step: this iteration's spans on every rank are one trace, whose id each rank derives alike; the
  // step span is a root of it, linked to its segment (CONTRACT §6).
  const std::int64_t iteration = iteration_ + 1;
  const bool own_trace = telemetry_.config().trace_layout == lens::TraceLayout::kStep;
  const lens::TraceId step_trace = own_trace ? lens::step_trace_id(telemetry_.run_id(), iteration) : lens::TraceId{};
  peer_links_.begin_step(step_trace);
  lens::ScopedSpan step;
  if (LENS_GROUP_ENABLED(mg::step)) {
    step.start(mg::step, names().train_step, {{"megatron.iteration", iteration}, lens::megatron::kGoodput},
               {.trace_id = own_trace ? &step_trace : nullptr});
    if (own_trace && segment.is_valid()) step.add_link(segment);
    if (change)
      step.add_event("lens.span_groups.changed", {{"lens.span_groups", std::string_view(change->groups_text)},
                                                  {"lens.span_groups.for", change->iterations},
                                                  {"lens.span_groups.restored", change->restored}});
  }
  grad_buckets_->begin_iteration(lens::current_context(), step_trace);
  const int stages = topology_.pipeline_size;
  const std::int64_t warmup = std::min<std::int64_t>(stages - topology_.stage() - 1, microbatches_);
  const std::int64_t steady = microbatches_ - warmup;
  std::deque<std::pair<std::int64_t, InFlight>> in_flight;
  // Summed as a tensor, read once per step: each .item() is a device sync on a GPU.
  torch::Tensor loss_sum = torch::zeros({1});
  {
    LENS_SPAN(mg::forward_backward, names().forward_backward, {names().num_microbatches_key, microbatches_});
    std::int64_t next_forward = 0, next_backward = 0;
    auto run_forward = [&](const torch::Tensor& received) {
      InFlight f = forward(next_forward, received, corpus_.train, 0, true);
      if (topology_.last_stage()) loss_sum += f.loss.detach();
      send_forward(next_forward, f.output);
      in_flight.emplace_back(next_forward++, std::move(f));
    };
    auto run_backward = [&](const torch::Tensor& output_grad) {
      auto [micro, f] = std::move(in_flight.front());
      in_flight.pop_front();
      if (micro == microbatches_ - 1) grad_buckets_->arm();  // its gradients complete the buckets
      backward(micro, f, output_grad);
      ++next_backward;
      if (!topology_.first_stage()) send_backward(micro, f.input.grad());
    };
    for (std::int64_t i = 0; i < warmup; ++i) run_forward(recv_forward(next_forward, true));
    for (std::int64_t i = 0; i < steady; ++i) {
      run_forward(recv_forward(next_forward, warmup == 0 && i == 0));
      run_backward(recv_backward(next_backward));
    }
    for (std::int64_t i = 0; i < warmup; ++i) run_backward(recv_backward(next_backward));
    for (auto& w : pending_sends_) w->wait();
    pending_sends_.clear();
  }
  grad_buckets_->finish();
  StepResult r{};
  {
    LENS_SPAN_NAMED(optimizer_step, mg::optimizer, names().optimizer_step);
    stall_if("optimizer");
    r.grad_norm = clip_and_norm();
    r.learning_rate = learning_rate();
    for (auto& group : optimizer_->param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(r.learning_rate);
    optimizer_->step();
    optimizer_step.set_attributes({{"megatron.grad_norm", r.grad_norm}, {"megatron.update_successful", true}});
  }
  // The loss is known on the last stage: give it to the pipeline, then average over the replicas.
  torch::Tensor loss = loss_sum / static_cast<double>(microbatches_);
  parallel_.broadcast(parallel_.pipeline(), loss, stages - 1);
  parallel_.allreduce(parallel_.data(), loss);
  r.loss = loss.item<double>() / topology_.data_parallel_size;
  ++iteration_;
  lens::end_step(iteration_);
  step.set_attributes({{"megatron.loss", r.loss}, {"megatron.grad_norm", r.grad_norm}});
  // Megatron's megatron.train.iteration says whether the update was skipped (never, in this fp32 trainer).
  if (telemetry_.config().span_names == lens::SpanNaming::kMegatron) step.set_attributes({{"megatron.skipped", false}});
  return r;
}

// The global gradient norm (all stages and tensor-parallel ranks; the replicas agree after the sync), then clipping
// to --clip-grad. Every gradient lives in the buckets' flat buffers: one reduction and one scale per bucket, not per
// parameter. A parameter every tensor-parallel rank holds whole is counted on the first of them only, as Megatron
// counts it, so the norm is the same whatever the tensor-parallel size.
double Trainer::clip_and_norm() {
  torch::Tensor squares = grad_buckets_->squared_norm().reshape({1});
  if (topology_.tensor_rank() != 0) {
    torch::NoGradGuard no_grad;
    for (const torch::Tensor& p : tensor_parallel_duplicates_) squares -= p.grad().pow(2).sum();
  }
  parallel_.allreduce(parallel_.tensor(), squares);
  parallel_.allreduce(parallel_.pipeline(), squares);
  const double norm = std::sqrt(squares.item<double>());
  if (args_.clip_grad > 0 && norm > args_.clip_grad) grad_buckets_->scale(args_.clip_grad / (norm + 1e-6));
  return norm;
}

double Trainer::learning_rate() const {
  const double it = static_cast<double>(iteration_);
  if (args_.lr_warmup_iters > 0 && iteration_ < args_.lr_warmup_iters)
    return args_.lr * (it + 1) / static_cast<double>(args_.lr_warmup_iters);
  if (args_.lr_decay_style == "constant" || args_.train_iters <= args_.lr_warmup_iters) return args_.lr;
  const double progress = (it - static_cast<double>(args_.lr_warmup_iters)) /
                          static_cast<double>(args_.train_iters - args_.lr_warmup_iters);
  const double decay = args_.lr_decay_style == "linear" ? 1.0 - progress : 0.5 * (1.0 + std::cos(M_PI * progress));
  return args_.min_lr + (args_.lr - args_.min_lr) * std::max(0.0, decay);
}

double Trainer::evaluate() {
  LENS_SPAN(mg::evaluate, "megatron.evaluate", {"megatron.eval_iters", args_.eval_iters});
  torch::NoGradGuard no_grad;
  torch::Tensor loss_sum = torch::zeros({1});
  for (std::int64_t e = 0; e < args_.eval_iters; ++e) {
    LENS_SPAN(mg::evaluate, "megatron.evaluate.step", {"megatron.eval_iteration", e + 1});
    for (std::int64_t micro = 0; micro < microbatches_; ++micro) {
      torch::Tensor received = topology_.first_stage()
                                   ? torch::Tensor()
                                   : parallel_.recv(activation_shape(), -1, trainer::Parallel::kForward);
      InFlight f = forward(micro, received, corpus_.valid, 1 + static_cast<std::uint64_t>(e), false);
      if (topology_.last_stage()) loss_sum += f.loss;
      if (!topology_.last_stage()) parallel_.send(f.output, +1, trainer::Parallel::kForward)->wait();
    }
  }
  torch::Tensor loss = loss_sum / static_cast<double>(args_.eval_iters * microbatches_);
  parallel_.broadcast(parallel_.pipeline(), loss, topology_.pipeline_size - 1);
  parallel_.allreduce(parallel_.data(), loss);
  return loss.item<double>() / topology_.data_parallel_size;
}

namespace {

std::string iteration_dir(const std::string& root, std::int64_t iteration) {
  char name[32];
  std::snprintf(name, sizeof name, "iter_%07lld", static_cast<long long>(iteration));
  return (std::filesystem::path(root) / name).string();
}

// Megatron's file of one model-parallel rank: mp_rank_<tensor-parallel rank>_<pipeline stage>.
std::string stage_file(const std::string& iteration_path, int tensor_rank, int stage) {
  char name[48];
  std::snprintf(name, sizeof name, "mp_rank_%02d_%03d", tensor_rank, stage);
  return (std::filesystem::path(iteration_path) / name / "model_optim_rng.pt").string();
}

}  // namespace

// Each stage's first replica writes its file; the tracker file is written last, by rank 0, after every rank is
// done (a crash mid-save leaves the previous checkpoint as the latest). With --async-save the bytes go to the
// worker process and the tracker is written once the worker says they are in place (at the next save or at
// the end of training).
void Trainer::start_checkpoint_part(lens::ScopedSpan& span, lens::SpanGroup group, lens::SpanName name) const {
  if (!LENS_GROUP_ENABLED(group)) return;
  if (megatron_names())
    span.start(group, name, {lens::megatron::kGoodput});
  else
    span.start(group, name);
}

void Trainer::save_checkpoint(const std::string& dir) {
  {
    // The previous asynchronous save, waited for: Megatron's megatron.checkpoint.save.finalize.
    const bool finalizes = megatron_names() && pending_save_iteration_ >= 0;
    LENS_SPAN_IF(finalizes, mg::checkpoint, "megatron.checkpoint.save.finalize", lens::megatron::kGoodput);
    finish_pending_save();
  }
  LENS_SPAN_NAMED(save, mg::checkpoint, names().save_checkpoint, {"megatron.iteration", iteration_},
                  lens::megatron::kGoodput);
  const std::string path = stage_file(iteration_dir(dir, iteration_), topology_.tensor_rank(), topology_.stage());
  if (saves()) {
    torch::serialize::OutputArchive archive, model_archive, optimizer_archive;
    std::ostringstream bytes;
    {
      lens::ScopedSpan state_dict;
      start_checkpoint_part(state_dict, mg::checkpoint, names().save_checkpoint_state_dict);
      model_->save(model_archive);
      optimizer_->save(optimizer_archive);
      archive.write("model", model_archive);
      archive.write("optimizer", optimizer_archive);
      archive.write("iteration", torch::tensor({iteration_}, torch::kLong));
      archive.save_to(bytes);
    }
    if (checkpoint_worker_) {
      LENS_TRACE_REGION("checkpoint.handoff");
      checkpoint_worker_->submit(lens::build_worker_bootstrap(telemetry_, resource_, save.context()).serialize(), path,
                                 bytes.str());
    } else {
      lens::ScopedSpan io_write;
      start_checkpoint_part(io_write, mg::checkpoint, names().save_checkpoint_io_write);
      {
        LENS_TRACE_REGION("checkpoint.mkdir");
        std::filesystem::create_directories(std::filesystem::path(path).parent_path());
      }
      LENS_TRACE_REGION("checkpoint.write_file");
      std::ofstream(path + ".tmp", std::ios::binary) << bytes.str();
      std::filesystem::rename(path + ".tmp", path);
    }
  }
  if (args_.async_save) {
    pending_save_iteration_ = iteration_;
    last_save_dir_ = dir;
    return;
  }
  parallel_.barrier();
  last_save_dir_ = dir;
  write_tracker(iteration_);
}

void Trainer::finish_pending_save() {
  if (pending_save_iteration_ < 0) return;
  const bool written = !checkpoint_worker_ || checkpoint_worker_->wait_written();
  auto ok = torch::tensor({written ? 0.0f : 1.0f});
  std::vector<torch::Tensor> tensors{ok};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::MAX;
  parallel_.world().allreduce(tensors, options)->wait();
  if (tensors[0].item<float>() == 0) {
    write_tracker(pending_save_iteration_);
  } else if (topology_.rank == 0) {
    spdlog::warn("pretrain_gpt: the checkpoint of iteration {} was not written; the latest stays as it was",
                 pending_save_iteration_);
  }
  pending_save_iteration_ = -1;
}

void Trainer::write_tracker(std::int64_t iteration) {
  if (topology_.rank != 0) return;
  LENS_TRACE_REGION("checkpoint.tracker");
  const auto tracker = std::filesystem::path(last_save_dir_) / "latest_checkpointed_iteration.txt";
  std::ofstream(tracker.string() + ".tmp") << iteration << "\n";
  std::filesystem::rename(tracker.string() + ".tmp", tracker);
}

bool Trainer::load_checkpoint(const std::string& dir) {
  const auto tracker = std::filesystem::path(dir) / "latest_checkpointed_iteration.txt";
  std::ifstream in(tracker);
  std::int64_t saved = -1;
  if (!(in >> saved)) return false;
  LENS_SPAN(mg::load_checkpoint, names().load_checkpoint, {"megatron.iteration", saved}, lens::megatron::kGoodput);
  torch::serialize::InputArchive archive, model_archive, optimizer_archive;
  {
    lens::ScopedSpan io_read;
    start_checkpoint_part(io_read, mg::load_checkpoint, names().load_checkpoint_io_read);
    const std::string path = stage_file(iteration_dir(dir, saved), topology_.tensor_rank(), topology_.stage());
    try {
      archive.load_from(path);
    } catch (const std::exception& e) {
      throw std::runtime_error("cannot load " + path + ": " + trainer::error_message(e));
    }
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

}  // namespace trainer
