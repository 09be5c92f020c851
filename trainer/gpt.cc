#include "gpt.h"

#include <cmath>

#include "lens/megatron.h"
#include "simulated_gpu.h"

namespace trainer {

namespace mg = lens::megatron::group;

CausalSelfAttentionImpl::CausalSelfAttentionImpl(int hidden, int heads) : heads_(heads) {
  qkv_ = register_module("qkv", torch::nn::Linear(hidden, 3 * hidden));
  proj_ = register_module("proj", torch::nn::Linear(hidden, hidden));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const auto batch = x.size(0), seq = x.size(1), hidden = x.size(2), head_dim = hidden / heads_;
  auto qkv = qkv_(x).view({batch, seq, 3, heads_, head_dim}).permute({2, 0, 3, 1, 4});  // 3, B, H, S, D
  auto q = qkv[0], k = qkv[1], v = qkv[2];
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));
  auto future = torch::ones({seq, seq}, torch::kBool).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  auto out = torch::matmul(torch::softmax(scores, -1), v);  // B, H, S, D
  return proj_(out.transpose(1, 2).reshape({batch, seq, hidden}));
}

MlpImpl::MlpImpl(int hidden) {
  up_ = register_module("up", torch::nn::Linear(hidden, 4 * hidden));
  down_ = register_module("down", torch::nn::Linear(4 * hidden, hidden));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) { return down_(torch::gelu(up_(x))); }

TransformerLayerImpl::TransformerLayerImpl(int hidden, int heads, int layer_number) : layer_number_(layer_number) {
  norm1_ = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})));
  attention_ = register_module("attention", CausalSelfAttention(hidden, heads));
  norm2_ = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})));
  mlp_ = register_module("mlp", Mlp(hidden));
}

torch::Tensor TransformerLayerImpl::forward(const torch::Tensor& x) {
  LENS_SPAN(mg::layer, "megatron.layer.forward", {"megatron.layer_number", layer_number_});
  torch::Tensor h;
  {
    LENS_SPAN(mg::layer, "megatron.layer.self_attention");
    h = x + attention_(norm1_(x));
    SimulatedGpu::kernel();
  }
  LENS_SPAN(mg::layer, "megatron.layer.mlp");
  SimulatedGpu::kernel();
  return h + mlp_(norm2_(h));
}

GptStageImpl::GptStageImpl(const GptConfig& config) : config_(config) {
  const int per_stage = config.num_layers / config.stages;
  if (first()) {
    tokens_ = register_module("tokens", torch::nn::Embedding(GptConfig::kVocab, config.hidden_size));
    positions_ = register_module("positions", torch::nn::Embedding(config.seq_length, config.hidden_size));
  }
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (int i = 0; i < per_stage; ++i) {
    const int layer_number = config.stage * per_stage + i + 1;  // 1-based across the whole model, as Megatron
    layers_->push_back(TransformerLayer(config.hidden_size, config.num_attention_heads, layer_number));
  }
  if (last()) {
    final_norm_ =
        register_module("final_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.hidden_size})));
    head_ = register_module("head", torch::nn::Linear(config.hidden_size, GptConfig::kVocab));
  }
}

torch::Tensor GptStageImpl::forward(const torch::Tensor& input) {
  torch::Tensor h = input;
  if (first()) h = tokens_(input) + positions_(torch::arange(input.size(1), torch::kLong));
  for (auto& layer : *layers_) h = layer->as<TransformerLayer>()->forward(h);
  if (last()) h = head_(final_norm_(h));
  return h;
}

double flops_per_iteration(const GptConfig& c, std::int64_t global_batch_size) {
  // 24 B s L h^2 (1 + s / 6h + V / 16 L h), Megatron's model-FLOPs formula (no activation recomputation).
  const double b = static_cast<double>(global_batch_size), s = static_cast<double>(c.seq_length);
  const double l = c.num_layers, h = c.hidden_size, v = static_cast<double>(GptConfig::kVocab);
  return 24.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h));
}

}  // namespace trainer
