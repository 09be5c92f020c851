#include "grad_buckets.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include <stdexcept>

namespace trainer {

namespace mg = lens::megatron::group;

GradBuckets::GradBuckets(const std::vector<torch::Tensor>& parameters, std::int64_t bucket_elements,
                         c10d::ProcessGroupGloo& group, bool overlap, int first_replica_rank, int replica_stride)
    : group_(group), overlap_(overlap), first_replica_rank_(first_replica_rank), replica_stride_(replica_stride) {
  // Which bucket each parameter (in reverse order) falls in, and the buckets' sizes.
  std::vector<std::size_t> bucket_of;
  std::vector<std::int64_t> elements{0};
  for (auto p = parameters.rbegin(); p != parameters.rend(); ++p) {
    if (bucket_elements > 0 && elements.back() >= bucket_elements) elements.push_back(0);
    bucket_of.push_back(elements.size() - 1);
    elements.back() += p->numel();
  }
  if (parameters.empty()) return;
  const bool replicated = group.getSize() > 1;
  const auto options = parameters.front().options().requires_grad(false);
  for (std::int64_t n : elements) {
    Bucket bucket;
    bucket.flat = torch::zeros({n}, options);
    buckets_.push_back(std::move(bucket));
  }

  torch::NoGradGuard no_grad;
  std::vector<std::int64_t> offset(buckets_.size(), 0);
  std::size_t i = 0;
  for (auto p = parameters.rbegin(); p != parameters.rend(); ++p, ++i) {
    if (p->dtype() != options.dtype()) throw std::invalid_argument("gradient buckets need one dtype");
    const std::size_t b = bucket_of[i];
    Bucket& bucket = buckets_[b];
    const torch::Tensor& param = *p;
    param.mutable_grad() = bucket.flat.narrow(0, offset[b], param.numel()).view(param.sizes());
    offset[b] += param.numel();
    ++bucket.parameters;
    if (!overlap_ || !replicated) continue;
    auto accumulator = torch::autograd::impl::grad_accumulator(param);
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, b](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_gradient_accumulated(b);
          return outputs;
        }));
    accumulators_.push_back(std::move(accumulator));
  }
}

void GradBuckets::begin_iteration(const lens::SpanContext& parent, const lens::TraceId& step_trace) {
  parent_ = parent;
  peer_links_.begin_step(step_trace);
  armed_ = false;
  next_to_start_ = 0;
  for (Bucket& b : buckets_) {
    b.flat.zero_();
    b.ready = 0;
  }
}

void GradBuckets::arm() { armed_ = overlap_; }

// Runs inside backward, on the thread that called it (CPU autograd), after the gradient was added to .grad.
void GradBuckets::on_gradient_accumulated(std::size_t bucket) {
  if (!armed_) return;
  ++buckets_[bucket].ready;
  start_ready_buckets();
}

void GradBuckets::start_ready_buckets() {
  while (next_to_start_ < buckets_.size() && buckets_[next_to_start_].ready == buckets_[next_to_start_].parameters)
    start(buckets_[next_to_start_++]);
}

void GradBuckets::start_synced(lens::Span& span, lens::SpanName name, std::string_view part,
                               const lens::StartOptions& options) {
  if (!LENS_GROUP_ENABLED(mg::communication)) return;
  const int rank = replica_rank(group_.getRank());
  const lens::SpanId id = peer_links_.id(PeerLinks::grad_sync(part, rank));
  lens::StartOptions with_id = options;
  with_id.span_id = &id;
  span.start(mg::communication, name, {}, with_id);
  std::vector<std::string> peers;
  for (int r = 0; r < group_.getSize(); ++r)
    if (r != group_.getRank()) peers.push_back(PeerLinks::grad_sync(part, replica_rank(r)));
  peer_links_.link_to_peers(span, peers);
}

void GradBuckets::start(Bucket& bucket) {
  lens::Span span;
  start_synced(span, "megatron.grad_sync.start", "bucket" + std::to_string(&bucket - buckets_.data()),
               {.parent = &parent_});
  std::vector<torch::Tensor> tensors{bucket.flat};
  bucket.work = group_.allreduce(tensors);
}

void GradBuckets::finish() {
  armed_ = false;
  if (group_.getSize() == 1) return;  // one replica: nothing to sync
  // A parameter that took no part in the last backward leaves its bucket short: start the rest now, in order.
  while (next_to_start_ < buckets_.size()) start(buckets_[next_to_start_++]);
  lens::Span span;  // ended when this returns
  start_synced(span, "megatron.grad_sync.finish", "finish", {});
  LENS_STEP_PHASE(lens::StepPhase::kWait);
  const double replicas = group_.getSize();
  for (Bucket& b : buckets_) {
    b.work->wait();
    b.work.reset();
    b.flat.div_(replicas);
  }
}

torch::Tensor GradBuckets::squared_norm() const {
  torch::NoGradGuard no_grad;
  torch::Tensor sum = torch::zeros({});
  for (const Bucket& b : buckets_) sum += b.flat.dot(b.flat);
  return sum;
}

void GradBuckets::scale(double factor) {
  torch::NoGradGuard no_grad;
  for (Bucket& b : buckets_) b.flat.mul_(factor);
}

}  // namespace trainer
