// The GPT decoder, cut into pipeline stages: stage 0 holds the token and position embeddings, every stage a
// contiguous run of transformer layers (causal self-attention and an MLP, each behind a LayerNorm with a residual),
// the last stage the final norm and the LM head. Byte-level tokens: a vocabulary of 256. Each layer's forward is
// traced per micro-batch in the `layer` group (megatron.layer.forward > self_attention, mlp).
#pragma once

#include <torch/torch.h>

namespace trainer {

struct GptConfig {
  int num_layers, hidden_size, num_attention_heads;
  std::int64_t seq_length;
  int stage, stages;
  static constexpr std::int64_t kVocab = 256;
};

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  CausalSelfAttentionImpl(int hidden, int heads);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int heads_;
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(int hidden);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Linear up_{nullptr}, down_{nullptr};
};
TORCH_MODULE(Mlp);

class TransformerLayerImpl : public torch::nn::Module {
 public:
  TransformerLayerImpl(int hidden, int heads, int layer_number);
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

 private:
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
