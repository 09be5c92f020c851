// Megatron's tensor-parallel layers: a linear layer split over the ranks of the tensor-parallel group, by output
// columns (ColumnParallelLinear: attention's QKV projection, the MLP's first layer) or by input rows
// (RowParallelLinear: attention's output projection, the MLP's second layer), with the two all-reduces that keep
// the split invisible to the layers around it:
//   - copy_to_tensor_model_parallel_region: identity in forward, all-reduce of the input's gradient in backward
//     (before a column-parallel layer, whose ranks each hold a part of the input's gradient);
//   - reduce_from_tensor_model_parallel_region: all-reduce of the partial outputs in forward, identity in backward
//     (after a row-parallel layer).
// Each all-reduce is the span megatron.tp.all_reduce (group communication) with `megatron.tp.region` naming which
// of the two it is and `megatron.tp.pass` the pass of the micro-batch it runs in (forward, or backward: a
// recomputed forward runs in backward), and a wait of the step (LENS_STEP_PHASE kWait): a rank that computes slowly
// makes its tensor-parallel peers wait here, not compute longer. `lens report` takes it out of that pass's phase.
//
// A split layer is initialised as the whole layer, then cut: every rank draws the full weight from the same random
// stream and keeps its part, so a run's weights are the same whatever its tensor-parallel size (the loss of TP 2
// equals TP 1's within float rounding).
//
//   trainer::TensorParallel tp{.size = 2, .rank = 1, .group = &parallel.tensor()};
//   trainer::ColumnParallelLinear qkv(hidden, 3 * hidden, tp, /*parts=*/3);   // each of q, k, v split alike
//   trainer::RowParallelLinear proj(hidden, hidden, tp);
//   torch::Tensor y = proj(attention(qkv(x)));                                // y: [.., hidden], on every rank
#pragma once

#include <torch/torch.h>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace trainer {

// The group a layer is split over: its size, this rank's place in it, and the group itself (null when size is 1).
struct TensorParallel {
  int size = 1, rank = 0;
  c10d::ProcessGroupGloo* group = nullptr;
  bool split() const { return size > 1; }
};

// Marks the calling thread as running a micro-batch's backward until it is destroyed (megatron.tp.pass).
class BackwardPass {
 public:
  BackwardPass();
  ~BackwardPass();
  BackwardPass(const BackwardPass&) = delete;
  BackwardPass& operator=(const BackwardPass&) = delete;

 private:
  bool was_;
};

// Identity in forward; the sum of the gradient over the group in backward.
torch::Tensor copy_to_tensor_model_parallel_region(const torch::Tensor& x, const TensorParallel& tp);
// The sum of `x` over the group in forward; identity in backward.
torch::Tensor reduce_from_tensor_model_parallel_region(const torch::Tensor& x, const TensorParallel& tp);

// y = x W^T + b with W's output rows split: this rank computes out / size of them. `parts`: the output is `parts`
// equal blocks (QKV: 3), each split alike, so the rank's rows are the same slice of every block.
class ColumnParallelLinearImpl : public torch::nn::Module {
 public:
  ColumnParallelLinearImpl(int in, int out, const TensorParallel& tp, int parts = 1);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  TensorParallel tp_;
  torch::Tensor weight_, bias_;
};
TORCH_MODULE(ColumnParallelLinear);

// y = x W^T + b with W's input columns split: this rank takes in / size features of x (the output of a
// column-parallel layer, already split) and the partial products are summed over the group; b is added once,
// after the sum.
class RowParallelLinearImpl : public torch::nn::Module {
 public:
  RowParallelLinearImpl(int in, int out, const TensorParallel& tp);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  TensorParallel tp_;
  torch::Tensor weight_, bias_;
};
TORCH_MODULE(RowParallelLinear);

}  // namespace trainer
