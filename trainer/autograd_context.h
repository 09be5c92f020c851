// An object a custom autograd Function's backward needs (a process group, the stage whose layers it runs again),
// carried in its context's saved data, which holds IValues: a capsule around the object's address. The object must
// outlive the backward (the trainer's process groups and model do).
//
//   trainer::save_pointer(ctx, "group", group);                              // in forward
//   auto& group = *trainer::saved_pointer<c10d::ProcessGroupGloo>(ctx, "group");  // in backward
#pragma once

#include <torch/torch.h>

namespace trainer {

namespace internal {
struct PointerCapsule : torch::CustomClassHolder {
  explicit PointerCapsule(void* p) : pointer(p) {}
  void* pointer;
};
}  // namespace internal

template <typename T>
void save_pointer(torch::autograd::AutogradContext* ctx, const std::string& key, T* object) {
  ctx->saved_data[key] = c10::IValue::make_capsule(c10::make_intrusive<internal::PointerCapsule>(object));
}

template <typename T>
T* saved_pointer(torch::autograd::AutogradContext* ctx, const std::string& key) {
  return static_cast<T*>(static_cast<internal::PointerCapsule*>(ctx->saved_data[key].toCapsule().get())->pointer);
}

}  // namespace trainer
