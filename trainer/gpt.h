// The GPT decoder, cut into pipeline stages: stage 0 holds the token and position embeddings, every stage a
// contiguous run of transformer layers (causal self-attention and an MLP, each behind a LayerNorm with a residual),
// the last stage the final norm and the LM head. Byte-level tokens: a vocabulary of 256. Each layer's forward is
// traced per micro-batch in the `layer` group (megatron.layer.forward > self_attention, mlp).
//
// With tensor parallelism the attention heads and the MLP's columns are split over the tensor-parallel ranks, as
// Megatron splits them (tensor_parallel.h); the embeddings, norms and LM head stay whole on every rank. With
// activation recomputation (--recompute-granularity full) the recomputed layers keep only their input in forward
// and run their forward again in backward, inside megatron.activation.recompute (group activation_offload).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "tensor_parallel.h"

namespace trainer {

// Which layers run their forward again in backward (Megatron's --recompute-method with --recompute-num-layers).
enum class Recompute { kNone, kUniform, kBlock };

struct GptConfig {
  int num_layers, hidden_size, num_attention_heads;
  std::int64_t seq_length;
  int stage, stages;
  TensorParallel tp{};
  Recompute recompute = Recompute::kNone;
  int recompute_num_layers = 1;  // kUniform: layers per recomputed chunk; kBlock: recomputed layers of the stage
  static constexpr std::int64_t kVocab = 256;
};

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  CausalSelfAttentionImpl(int hidden, int heads, const TensorParallel& tp);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int heads_;  // this rank's heads
  ColumnParallelLinear qkv_{nullptr};
  RowParallelLinear proj_{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(int hidden, const TensorParallel& tp);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  ColumnParallelLinear up_{nullptr};
  RowParallelLinear down_{nullptr};
};
TORCH_MODULE(Mlp);

class TransformerLayerImpl : public torch::nn::Module {
 public:
  TransformerLayerImpl(int hidden, int heads, int layer_number, const TensorParallel& tp);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int layer_number_;
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  CausalSelfAttention attention_{nullptr};
  Mlp mlp_{nullptr};
};
TORCH_MODULE(TransformerLayer);

// One pipeline stage of the model.
class GptStageImpl : public torch::nn::Module {
 public:
  explicit GptStageImpl(const GptConfig& config);
  // First stage: `input` is token ids [batch, seq] (int64); otherwise hidden states [batch, seq, hidden].
  // Last stage: returns logits [batch, seq, 256]; otherwise hidden states.
  torch::Tensor forward(const torch::Tensor& input);
  bool first() const { return config_.stage == 0; }
  bool last() const { return config_.stage == config_.stages - 1; }
  // The parameters every tensor-parallel rank holds whole (all but the split layers'): counted once in the
  // gradient norm.
  std::vector<torch::Tensor> tensor_parallel_duplicates();
  // Runs layers [begin, end) of this stage (indices into the stage's layers).
  torch::Tensor run_layers(torch::Tensor h, std::size_t begin, std::size_t end);
  // The Megatron layer number (1-based across the model) of this stage's first layer.
  std::int64_t first_layer_number() const {
    return std::int64_t{config_.stage} * (config_.num_layers / config_.stages) + 1;
  }

 private:
  // The end of the chunk of layers recomputed from `begin` (begin itself: none).
  std::size_t recomputed_until(std::size_t begin) const;

  GptConfig config_;
  torch::nn::Embedding tokens_{nullptr}, positions_{nullptr};
  torch::nn::ModuleList layers_;
  torch::nn::LayerNorm final_norm_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(GptStage);

// Model FLOPs of one forward+backward of a batch (the Megatron estimate), for the TFLOP/s of the log line.
double flops_per_iteration(const GptConfig& config, std::int64_t global_batch_size);

}  // namespace trainer
