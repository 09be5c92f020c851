#include "tensor_parallel.h"

#include <cstdint>
#include <string_view>
#include <vector>

#include "autograd_context.h"
#include "lens/lens.h"

namespace trainer {

namespace mg = lens::megatron::group;

namespace {

thread_local bool t_in_backward = false;

// Sums `t` over the group in place: the span megatron.tp.all_reduce, and time the step waited.
void all_reduce(torch::Tensor& t, c10d::ProcessGroupGloo& group, std::string_view region) {
  LENS_SPAN(mg::communication, "megatron.tp.all_reduce", {"megatron.tp.region", region},
            {"megatron.tp.pass", std::string_view(t_in_backward ? "backward" : "forward")});
  LENS_STEP_PHASE(lens::StepPhase::kWait);
  std::vector<torch::Tensor> tensors{t};
  group.allreduce(tensors)->wait();
}

struct CopyToRegion : public torch::autograd::Function<CopyToRegion> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               c10d::ProcessGroupGloo* group) {
    save_pointer(ctx, "group", group);
    return x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    torch::Tensor grad = grads[0].contiguous().clone();
    all_reduce(grad, *saved_pointer<c10d::ProcessGroupGloo>(ctx, "group"), "copy_to_tensor_model_parallel_region");
    return {grad, torch::Tensor()};
  }
};

struct ReduceFromRegion : public torch::autograd::Function<ReduceFromRegion> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& x,
                               c10d::ProcessGroupGloo* group) {
    torch::Tensor sum = x.contiguous().clone();
    all_reduce(sum, *group, "reduce_from_tensor_model_parallel_region");
    return sum;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], torch::Tensor()};
  }
};

}  // namespace

BackwardPass::BackwardPass() : was_(t_in_backward) { t_in_backward = true; }
BackwardPass::~BackwardPass() { t_in_backward = was_; }

torch::Tensor copy_to_tensor_model_parallel_region(const torch::Tensor& x, const TensorParallel& tp) {
  if (!tp.split()) return x;
  return CopyToRegion::apply(x, tp.group);
}

torch::Tensor reduce_from_tensor_model_parallel_region(const torch::Tensor& x, const TensorParallel& tp) {
  if (!tp.split()) return x;
  return ReduceFromRegion::apply(x, tp.group);
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(int in, int out, const TensorParallel& tp, int parts) : tp_(tp) {
  TORCH_CHECK(out % (parts * tp.size) == 0, "ColumnParallelLinear: ", out, " outputs do not split into ", parts,
              " blocks over ", tp.size, " ranks");
  torch::NoGradGuard no_grad;
  torch::nn::Linear whole(in, out);  // the same random draws on every rank, and as without a split
  const std::int64_t block = out / parts, local = block / tp.size;
  std::vector<torch::Tensor> weights, biases;
  for (int p = 0; p < parts; ++p) {
    weights.push_back(whole->weight.narrow(0, p * block + tp.rank * local, local));
    biases.push_back(whole->bias.narrow(0, p * block + tp.rank * local, local));
  }
  weight_ = register_parameter("weight", torch::cat(weights));  // cat copies: no view of `whole`
  bias_ = register_parameter("bias", torch::cat(biases));
}

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& x) {
  return torch::linear(copy_to_tensor_model_parallel_region(x, tp_), weight_, bias_);
}

RowParallelLinearImpl::RowParallelLinearImpl(int in, int out, const TensorParallel& tp) : tp_(tp) {
  TORCH_CHECK(in % tp.size == 0, "RowParallelLinear: ", in, " inputs do not split over ", tp.size, " ranks");
  torch::NoGradGuard no_grad;
  torch::nn::Linear whole(in, out);
  const std::int64_t local = in / tp.size;
  weight_ = register_parameter("weight", whole->weight.narrow(1, tp.rank * local, local).clone());
  bias_ = register_parameter("bias", whole->bias.clone());
}

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& x) {
  if (!tp_.split()) return torch::linear(x, weight_, bias_);
  return reduce_from_tensor_model_parallel_region(torch::linear(x, weight_), tp_) + bias_;
}

}  // namespace trainer
