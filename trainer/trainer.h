// The training of one pretrain_gpt rank: its pipeline stage of the GPT, the 1F1B schedule over its
// micro-batches, the data-parallel gradient sync, AdamW, evaluation and checkpoints, each traced where CONTRACT §6
// places it. The run around it (rendezvous, telemetry setup, the iteration loop, logging) is pretrain_gpt.cc.
//
//   trainer::Trainer trainer(args, parallel, corpus, telemetry, resource);
//   while (trainer.iteration() < args.train_iters) {
//     trainer::Trainer::StepResult r = trainer.train_step(rank0_context);
//     ...
//   }
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "args.h"
#include "checkpoint_worker.h"
#include "data.h"
#include "gpt.h"
#include "grad_buckets.h"
#include "lens/lens.h"
#include "parallel.h"
#include "peer_links.h"

namespace trainer {

class Trainer {
 public:
  Trainer(const Args& args, trainer::Parallel& parallel, const Corpus& corpus, const lens::Telemetry& telemetry,
          lens::ResourceAttributes resource)
      : args_(args),
        parallel_(parallel),
        topology_(parallel.topology()),
        corpus_(corpus),
        telemetry_(telemetry),
        resource_(std::move(resource)),
        microbatches_(trainer::num_microbatches(args, topology_.data_parallel_size)),
        model_config_{.num_layers = args.num_layers,
                      .hidden_size = args.hidden_size,
                      .num_attention_heads = args.num_attention_heads,
                      .seq_length = args.seq_length,
                      .stage = topology_.stage(),
                      .stages = topology_.pipeline_size,
                      .tp = {.size = topology_.tensor_parallel_size,
                             .rank = topology_.tensor_rank(),
                             .group = &parallel.tensor()},
                      .recompute = recompute_of(args),
                      .recompute_num_layers = args.recompute_num_layers} {
    torch::manual_seed(static_cast<std::uint64_t>(args_.seed) + static_cast<std::uint64_t>(topology_.stage()));
    model_ = trainer::GptStage(model_config_);
    optimizer_ = std::make_unique<torch::optim::AdamW>(
        model_->parameters(), torch::optim::AdamWOptions(args_.lr).weight_decay(args_.weight_decay));
    grad_buckets_ = std::make_unique<trainer::GradBuckets>(
        model_->parameters(), trainer::bucket_elements(args_, topology_.data_parallel_size), parallel_.data(),
        args_.overlap_grad_reduce, topology_.stage() * topology_.stage_stride() + topology_.tensor_rank(),
        topology_.tensor_parallel_size);
    tensor_parallel_duplicates_ = model_->tensor_parallel_duplicates();
    if (args_.async_save && saves()) checkpoint_worker_ = std::make_unique<trainer::CheckpointWorker>();
    activation_shape_ = {args_.micro_batch_size, args_.seq_length, args_.hidden_size};
  }

  std::int64_t iteration() const { return iteration_; }
  const trainer::GptConfig& config() const { return model_config_; }

  // One iteration, as the span megatron.train_step: forward and backward of every micro-batch (1F1B), gradient
  // sync, optimizer step. `segment`: the context of this segment's megatron.train, which the step span links
  // to when each step is a trace of its own (TRACE_LAYOUT=step). `change`: the span groups this iteration is the
  // first to run with (lens ctl), recorded as an event of the step span. Returns the loss averaged over
  // micro-batches and data-parallel ranks (known on every rank).
  struct StepResult {
    double loss, grad_norm, learning_rate;
  };
  StepResult train_step(const lens::SpanContext& segment, const std::optional<lens::SpanGroupChange>& change = {});
  double evaluate();
  void save_checkpoint(const std::string& dir);
  // --async-save: waits until the files of the last save are written, then records it as the latest.
  void finish_pending_save();
  bool load_checkpoint(const std::string& dir);

 private:
  struct InFlight {
    torch::Tensor input, output, loss;
  };
  InFlight forward(std::int64_t micro, const torch::Tensor& received, const std::vector<std::uint8_t>& data,
                   std::uint64_t stream, bool keep_graph);
  void backward(std::int64_t micro, InFlight& f, const torch::Tensor& output_grad);
  // Testing aid: --testing-slow-rank stops here until killed when this is --testing-stall-in's point of
  // --testing-stall-iteration.
  void stall_if(std::string_view point) const;
  // The point-to-point transfers of micro-batch `micro`, each a span linked to its other end in the step layout.
  torch::Tensor recv_forward(std::int64_t micro, bool linked);
  torch::Tensor recv_backward(std::int64_t micro);
  void send_forward(std::int64_t micro, const torch::Tensor& output);
  void send_backward(std::int64_t micro, const torch::Tensor& input_grad);
  void start_transfer(lens::ScopedSpan& span, lens::SpanName name, const std::string& key, std::string_view end) const;
  // The same replica and tensor-parallel position one stage on, or one stage back.
  int next_rank() const { return topology_.rank + topology_.stage_stride(); }
  int previous_rank() const { return topology_.rank - topology_.stage_stride(); }
  static Recompute recompute_of(const Args& args) {
    if (args.recompute_granularity.empty()) return Recompute::kNone;
    return args.recompute_method == "block" ? Recompute::kBlock : Recompute::kUniform;
  }
  double clip_and_norm();
  double learning_rate() const;
  at::IntArrayRef activation_shape() const { return activation_shape_; }

  const Args& args_;
  trainer::Parallel& parallel_;
  trainer::Topology topology_;
  // Each stage's first replica writes its files, one per tensor-parallel rank.
  bool saves() const { return topology_.data_rank() == 0; }
  void write_tracker(std::int64_t iteration);

  // Whether each forward activation travels with the context of the span that sent it (telemetry configured:
  // the same on every rank, exporting or not, so both sides agree on the messages).
  bool carries_contexts() const { return telemetry_.config().active(); }
  // The span names of SPAN_NAMES (the documented tree, or Megatron's exported names).
  const lens::megatron::SpanNames& names() const { return lens::megatron::span_names(telemetry_.config().span_names); }
  // SPAN_NAMES=megatron: today's Megatron-LM's spans and attributes (the checkpoint's parts count toward goodput).
  bool megatron_names() const { return telemetry_.config().span_names == lens::SpanNaming::kMegatron; }
  void start_checkpoint_part(lens::ScopedSpan& span, lens::SpanGroup group, lens::SpanName name) const;

  const Corpus& corpus_;
  const lens::Telemetry& telemetry_;
  lens::ResourceAttributes resource_;
  std::unique_ptr<trainer::CheckpointWorker> checkpoint_worker_;
  std::int64_t pending_save_iteration_ = -1;  // iteration of an async save not yet known written
  std::string last_save_dir_;                 // where the last save went
  std::int64_t microbatches_;
  trainer::GptConfig model_config_;
  trainer::GptStage model_{nullptr};
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::unique_ptr<trainer::GradBuckets> grad_buckets_;     // every parameter's .grad lives in these
  std::vector<torch::Tensor> tensor_parallel_duplicates_;  // the parameters every tensor-parallel rank holds whole
  trainer::PeerLinks peer_links_;                          // this step's transfers, linked end to end
  std::int64_t iteration_ = 0;
  std::vector<std::int64_t> activation_shape_;  // what one micro-batch sends between stages
  std::vector<c10::intrusive_ptr<c10d::Work>> pending_sends_;
};

}  // namespace trainer
