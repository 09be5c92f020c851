#include "gpt.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "autograd_context.h"
#include "lens/megatron.h"
#include "simulated_gpu.h"

namespace trainer {

namespace mg = lens::megatron::group;

CausalSelfAttentionImpl::CausalSelfAttentionImpl(int hidden, int heads, const TensorParallel& tp)
    : heads_(heads / tp.size) {
  qkv_ = register_module("qkv", ColumnParallelLinear(hidden, 3 * hidden, tp, /*parts=*/3));
  proj_ = register_module("proj", RowParallelLinear(hidden, hidden, tp));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const auto batch = x.size(0), seq = x.size(1);
  auto qkv = qkv_(x);  // B, S, 3 x this rank's heads x D
  const auto head_dim = qkv.size(2) / (std::int64_t{3} * heads_), hidden = heads_ * head_dim;
  qkv = qkv.view({batch, seq, 3, heads_, head_dim}).permute({2, 0, 3, 1, 4});  // 3, B, H, S, D
  auto q = qkv[0], k = qkv[1], v = qkv[2];
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));
  auto future = torch::ones({seq, seq}, torch::kBool).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  auto out = torch::matmul(torch::softmax(scores, -1), v);  // B, H, S, D
  return proj_(out.transpose(1, 2).reshape({batch, seq, hidden}));
}

MlpImpl::MlpImpl(int hidden, const TensorParallel& tp) {
  up_ = register_module("up", ColumnParallelLinear(hidden, 4 * hidden, tp));
  down_ = register_module("down", RowParallelLinear(4 * hidden, hidden, tp));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) { return down_(torch::gelu(up_(x))); }

TransformerLayerImpl::TransformerLayerImpl(int hidden, int heads, int layer_number, const TensorParallel& tp)
    : layer_number_(layer_number) {
  norm1_ = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})));
  attention_ = register_module("attention", CausalSelfAttention(hidden, heads, tp));
  norm2_ = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})));
  mlp_ = register_module("mlp", Mlp(hidden, tp));
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
    layers_->push_back(TransformerLayer(config.hidden_size, config.num_attention_heads, layer_number, config.tp));
  }
  if (last()) {
    final_norm_ =
        register_module("final_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.hidden_size})));
    head_ = register_module("head", torch::nn::Linear(config.hidden_size, GptConfig::kVocab));
  }
}

namespace {

// Full activation recomputation: forward runs the layers without keeping what backward needs (the Function's
// forward runs with gradients off) and keeps only their input; backward runs them again with gradients on, inside
// megatron.activation.recompute, then back-propagates through that second run. The stage and the layer range travel
// in the context's saved data (IValues: the stage's address as an integer).
struct RecomputedLayers : public torch::autograd::Function<RecomputedLayers> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, GptStageImpl* stage,
                               std::int64_t begin, std::int64_t end) {
    ctx->save_for_backward({x});
    save_pointer(ctx, "stage", stage);
    ctx->saved_data["begin"] = begin;
    ctx->saved_data["end"] = end;
    return stage->run_layers(x, static_cast<std::size_t>(begin), static_cast<std::size_t>(end));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* stage = saved_pointer<GptStageImpl>(ctx, "stage");
    torch::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::Tensor y;
    {
      LENS_SPAN(mg::activation_offload, "megatron.activation.recompute",
                {"megatron.layer_number", stage->first_layer_number() + ctx->saved_data["begin"].toInt()});
      torch::AutoGradMode grad_on(true);
      y = stage->run_layers(x, static_cast<std::size_t>(ctx->saved_data["begin"].toInt()),
                            static_cast<std::size_t>(ctx->saved_data["end"].toInt()));
    }
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor GptStageImpl::run_layers(torch::Tensor h, std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) h = (*layers_)[i]->as<TransformerLayer>()->forward(h);
  return h;
}

std::size_t GptStageImpl::recomputed_until(std::size_t begin) const {
  const auto n = static_cast<std::size_t>(config_.recompute_num_layers);
  switch (config_.recompute) {
    case Recompute::kNone: return begin;
    case Recompute::kUniform: return std::min(begin + n, layers_->size());
    case Recompute::kBlock: return begin < n ? begin + 1 : begin;
  }
  return begin;
}

torch::Tensor GptStageImpl::forward(const torch::Tensor& input) {
  torch::Tensor h = input;
  if (first()) h = tokens_(input) + positions_(torch::arange(input.size(1), torch::kLong));
  const bool recomputes = torch::GradMode::is_enabled() && h.requires_grad();
  for (std::size_t i = 0; i < layers_->size();) {
    const std::size_t until = recomputes ? recomputed_until(i) : i;
    if (until > i) {
      h = RecomputedLayers::apply(h, this, static_cast<std::int64_t>(i), static_cast<std::int64_t>(until));
      i = until;
    } else {
      h = run_layers(h, i, i + 1);
      ++i;
    }
  }
  if (last()) h = head_(final_norm_(h));
  return h;
}

std::vector<torch::Tensor> GptStageImpl::tensor_parallel_duplicates() {
  std::vector<torch::Tensor> split;
  for (const auto& module : modules(/*include_self=*/false)) {
    if (auto* column = dynamic_cast<ColumnParallelLinearImpl*>(module.get())) {
      for (const torch::Tensor& p : column->parameters(/*recurse=*/false)) split.push_back(p);
    } else if (auto* row = dynamic_cast<RowParallelLinearImpl*>(module.get())) {
      split.push_back(row->named_parameters(/*recurse=*/false)["weight"]);  // its bias is added after the sum
    }
  }
  std::vector<torch::Tensor> whole;
  for (const torch::Tensor& p : parameters())
    if (std::none_of(split.begin(), split.end(), [&](const torch::Tensor& s) { return s.is_same(p); }))
      whole.push_back(p);
  return whole;
}

double flops_per_iteration(const GptConfig& c, std::int64_t global_batch_size) {
  // 24 B s L h^2 (1 + s / 6h + V / 16 L h), Megatron's model-FLOPs formula (no activation recomputation).
  const double b = static_cast<double>(global_batch_size), s = static_cast<double>(c.seq_length);
  const double l = c.num_layers, h = c.hidden_size, v = static_cast<double>(GptConfig::kVocab);
  return 24.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h));
}

}  // namespace trainer
