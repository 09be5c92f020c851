// What a span name is in a training step, in one table: the phase of a step it counts toward (lens report's "where
// a step's time goes", CONTRACT §10) and the colour the HTML page's timeline draws it in. The report's classifier
// and the page's colours both read kSpanKinds, so a name the report counts as a phase is drawn as that phase.
//
//   step_part("megatron.microbatch.forward")   // kForward
//   colour_of("megatron.p2p.recv_forward")     // the pipeline receive's red
#pragma once

#include <array>
#include <string_view>

namespace lens_tools {

// Where a step's time goes: the spans of these kinds inside a rank's step span, summed; `other` is the rest.
// A tensor-parallel all-reduce runs inside a micro-batch's forward or backward: its time is its own phase and is
// taken out of the pass it runs in (megatron.tp.pass), so the phases never count a nanosecond twice.
enum Phase { kForward, kBackward, kPipelineReceiveWait, kGradSyncWait, kTensorParallelWait, kOptimizer, kPhaseCount };
inline constexpr std::array<const char*, kPhaseCount> kPhaseNames = {
    "forward", "backward", "pipeline_receive_wait", "grad_sync_wait", "tensor_parallel_wait", "optimizer"};
// A part of a step beside the phases: the forward-backward span, the pipeline bubble's denominator.
inline constexpr int kForwardBackward = kPhaseCount;
inline constexpr int kNoPart = -1;

enum class Match { kExact, kPrefix, kContains };

struct SpanKind {
  std::string_view name;
  Match match;
  int part;            // a Phase, kForwardBackward, or kNoPart (drawn in a colour, counted toward nothing)
  const char* colour;  // in the HTML timeline

  constexpr bool matches(std::string_view span_name) const noexcept {
    switch (match) {
      case Match::kExact: return span_name == name;
      case Match::kPrefix: return span_name.starts_with(name);
      case Match::kContains: return span_name.find(name) != std::string_view::npos;
    }
    return false;
  }
};

inline constexpr const char* kForwardColour = "#4e79a7";
inline constexpr const char* kBackwardColour = "#f28e2b";
inline constexpr const char* kReceiveColour = "#e15759";
inline constexpr const char* kSendColour = "#ff9da7";
inline constexpr const char* kGradSyncColour = "#b07aa1";
inline constexpr const char* kTensorParallelColour = "#edc948";
inline constexpr const char* kOptimizerColour = "#59a14f";
inline constexpr const char* kLayerColour = "#76b7b2";
inline constexpr const char* kOtherColour = "#bab0ac";

// In the order they are tried: the first entry that matches gives the colour; the first entry with a part that
// matches gives the part. Both name modes (CONTRACT §6): the micro-batch, pipeline and gradient-sync names are the
// same in both; the optimizer and forward-backward have a name in each.
inline constexpr std::array<SpanKind, 15> kSpanKinds = {{
    {"megatron.microbatch.forward", Match::kExact, kForward, kForwardColour},
    {"megatron.layer.forward", Match::kExact, kNoPart, kForwardColour},
    {"megatron.microbatch.backward", Match::kExact, kBackward, kBackwardColour},
    {"megatron.p2p.recv_", Match::kPrefix, kPipelineReceiveWait, kReceiveColour},
    {"megatron.pp.recv", Match::kPrefix, kNoPart, kReceiveColour},
    {"megatron.p2p.send", Match::kPrefix, kNoPart, kSendColour},
    {"megatron.grad_sync.finish", Match::kExact, kGradSyncWait, kGradSyncColour},
    {"megatron.grad_sync", Match::kPrefix, kNoPart, kGradSyncColour},
    {"megatron.tp.all_reduce", Match::kExact, kTensorParallelWait, kTensorParallelColour},
    {"megatron.optimizer_step", Match::kExact, kOptimizer, kOptimizerColour},
    {"megatron.train.iteration.optimizer", Match::kExact, kOptimizer, kOptimizerColour},
    {"megatron.forward_backward", Match::kExact, kForwardBackward, kOtherColour},
    {"megatron.train.iteration.forward_backward", Match::kExact, kForwardBackward, kOtherColour},
    {"optimizer", Match::kContains, kNoPart, kOptimizerColour},
    {"megatron.layer.", Match::kPrefix, kNoPart, kLayerColour},
}};

// What a span of this name counts toward in a step: a Phase, kForwardBackward, or kNoPart.
constexpr int step_part(std::string_view name) noexcept {
  for (const SpanKind& kind : kSpanKinds)
    if (kind.part != kNoPart && kind.matches(name)) return kind.part;
  return kNoPart;
}

// The colour of a span in the HTML timeline: by what it is in a step, grey for the rest.
constexpr const char* colour_of(std::string_view name) noexcept {
  for (const SpanKind& kind : kSpanKinds)
    if (kind.matches(name)) return kind.colour;
  return kOtherColour;
}

// A device span (docs/GPU.md) is its host span's name and this suffix: the time the GPU spent on what the host span
// launched. It counts toward no phase of the host's; the report puts it beside its host span's.
inline constexpr std::string_view kDeviceSuffix = ".device";

// The host span's name of a device span; empty for any other span.
constexpr std::string_view host_of_device_span(std::string_view name) noexcept {
  if (name.size() <= kDeviceSuffix.size() || !name.ends_with(kDeviceSuffix)) return {};
  return name.substr(0, name.size() - kDeviceSuffix.size());
}

static_assert(step_part("megatron.p2p.recv_forward") == kPipelineReceiveWait);
static_assert(host_of_device_span("megatron.layer.forward.device") == "megatron.layer.forward");
static_assert(host_of_device_span(".device").empty() && host_of_device_span("megatron.layer.forward").empty());
static_assert(step_part("megatron.grad_sync.start") == kNoPart);
static_assert(std::string_view(colour_of("megatron.forward_backward")) == kOtherColour);

}  // namespace lens_tools
