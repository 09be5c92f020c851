// Data-parallel gradient buckets, as Megatron's distributed optimizer wrapper keeps them: every parameter's .grad
// is a view into one flat buffer per bucket, so the micro-batches accumulate straight into what is all-reduced
// (no gathering copy before the sync, no scatter after). With overlap (--overlap-grad-reduce), a post-hook on
// each parameter's gradient accumulator counts the gradients of the last micro-batch's backward and starts a
// bucket's all-reduce the moment its last gradient lands, while backward goes on with the layers below.
//
//   GradBuckets buckets(model->parameters(), bucket_elements, parallel.data(), /*overlap=*/true);
//   buckets.begin_iteration(lens::current_context());  // zeroes the gradients (instead of optimizer.zero_grad())
//   ... forward/backward of micro-batches 0 .. N-2 ...
//   buckets.arm();                            // before the last micro-batch's backward
//   ... backward of micro-batch N-1: buckets start as they fill (megatron.grad_sync.start, one per bucket)
//   buckets.finish();                         // starts any left, waits (megatron.grad_sync.finish), averages
//
// Buckets are started in index order on every replica (a ready bucket waits for the ones before it): Gloo
// matches collectives by their order, so every replica must issue them in the same one.
#pragma once

#include <torch/csrc/autograd/function.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string_view>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <vector>

#include "lens/lens.h"
#include "peer_links.h"

namespace trainer {

class GradBuckets {
 public:
  // `bucket_elements`: a bucket closes once it holds at least this many elements (0: one bucket for all).
  // Parameters are bucketed in reverse order, the order backward produces their gradients.
  // `first_replica_rank`, `replica_stride`: the global rank of the group's rank 0 and the step between the global
  // ranks of its members (the tensor-parallel size), for the links between the replicas' grad_sync spans.
  GradBuckets(const std::vector<torch::Tensor>& parameters, std::int64_t bucket_elements, c10d::ProcessGroupGloo& group,
              bool overlap, int first_replica_rank = 0, int replica_stride = 1);
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  // Zeroes the gradients. `parent`: the context the grad_sync spans hang from (the train step), whatever span
  // is open when a hook fires; invalid: they are roots. `step_trace`: the step layout's trace, in which each
  // replica's grad_sync span links to the same span of every other replica (PeerLinks); invalid: no links.
  void begin_iteration(const lens::SpanContext& parent, const lens::TraceId& step_trace = {});
  // The next backward is the last of the iteration: its gradients complete the buckets.
  void arm();
  // Starts the buckets not yet started, waits for all, divides by the number of replicas.
  void finish();
  // The sum of the squares of every gradient (a 0-dimensional tensor), and scaling every gradient: over the flat
  // buffers, one operation per bucket.
  torch::Tensor squared_norm() const;
  void scale(double factor);

 private:
  struct Bucket {
    torch::Tensor flat;
    int parameters = 0;
    int ready = 0;
    c10::intrusive_ptr<c10d::Work> work;
  };
  void on_gradient_accumulated(std::size_t bucket);
  void start_ready_buckets();
  void start(Bucket& bucket);
  // Starts `span` (a grad_sync span) as this replica's `part`, linked to every other replica's.
  void start_synced(lens::Span& span, lens::SpanName name, std::string_view part, const lens::StartOptions& options);

  c10d::ProcessGroupGloo& group_;
  bool overlap_;
  std::vector<Bucket> buckets_;
  // The accumulators hold the hooks; autograd keeps them only weakly, so they are owned here.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::size_t next_to_start_ = 0;
  bool armed_ = false;
  lens::SpanContext parent_;
  int first_replica_rank_, replica_stride_;
  int replica_rank(int group_rank) const { return first_replica_rank_ + group_rank * replica_stride_; }
  PeerLinks peer_links_;
};

}  // namespace trainer
