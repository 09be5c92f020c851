// The process groups of a tensor- x data- x pipeline-parallel run over c10d Gloo, in Megatron's rank order (tensor
// parallel fastest, then data parallel, then pipeline): rank = (stage x DP + data-parallel rank) x TP + tensor-parallel
// rank. One TCP store rendezvous (MASTER_ADDR, MASTER_PORT) and four groups per rank: the world, its pipeline (the
// stages of one model replica at one tensor-parallel position), its data-parallel group (the replicas of one stage
// at one tensor-parallel position) and its tensor-parallel group (the ranks that split the layers of one stage of
// one replica). Point-to-point transfers run between neighbouring stages of the pipeline.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace trainer {

struct Topology {
  int rank = 0, world_size = 1;
  int pipeline_size = 1, data_parallel_size = 1, tensor_parallel_size = 1;
  // How long a rank waits in the rendezvous store for a key another rank has not set (c10d's timeout).
  std::chrono::seconds rendezvous_timeout{120};
  int stage() const { return rank / (data_parallel_size * tensor_parallel_size); }
  int data_rank() const { return (rank / tensor_parallel_size) % data_parallel_size; }
  int tensor_rank() const { return rank % tensor_parallel_size; }
  // The ranks of one stage: the same rank one stage on is this much higher.
  int stage_stride() const { return data_parallel_size * tensor_parallel_size; }
  bool first_stage() const { return stage() == 0; }
  bool last_stage() const { return stage() == pipeline_size - 1; }
};

// The rendezvous: a TCP store at MASTER_ADDR:MASTER_PORT (defaults 127.0.0.1:29500), hosted by rank 0 or, under
// torchrun, by its agent. kClient: one more connection to it (never the host). Nobody waits here for the other
// ranks to connect: a rank that never comes is named by the StartupWatch.
enum class StoreRole { kRendezvous, kClient };
bool hosts_rendezvous_store(const Topology& topology);
c10::intrusive_ptr<c10d::Store> make_store(const Topology& topology, StoreRole role = StoreRole::kRendezvous);

// An exception's message; LibTorch's errors without the C++ backtrace they carry.
std::string error_message(const std::exception& e);

// What every rank learns when a setup step failed on some of them.
class SetupFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs a setup step that may fail on some ranks only (an exporting rank's exporter, one stage's checkpoint file)
// and lets every rank know the outcome through the store: if it threw anywhere, it rethrows where it threw and
// every other rank throws SetupFailed naming the rank and its message, at once, instead of leaving them waiting
// in the next collective until its timeout. A rank that never reports (killed) fails the others after
// `deadline`. `name` must be unique per step.
void all_or_none(c10d::Store& store, const Topology& topology, const std::string& name,
                 const std::function<void()>& step, std::chrono::milliseconds deadline = std::chrono::minutes(2));

class Parallel {
 public:
  Parallel(const Topology& topology, c10::intrusive_ptr<c10d::Store> store);

  const Topology& topology() const { return topology_; }
  c10d::ProcessGroupGloo& world() { return *world_; }
  c10d::ProcessGroupGloo& pipeline() { return *pipeline_; }
  c10d::ProcessGroupGloo& data() { return *data_; }
  c10d::ProcessGroupGloo& tensor() { return *tensor_; }

  // To or from the neighbouring stage (+1 next, -1 previous). Forward activations use one tag, gradients another,
  // and the span contexts that travel with the activations a third, so each stays in order.
  enum Tag : int { kForward = 1, kBackward = 2, kForwardContext = 3 };
  c10::intrusive_ptr<c10d::Work> send(const torch::Tensor& tensor, int stage_offset, Tag tag);
  torch::Tensor recv(at::IntArrayRef shape, int stage_offset, Tag tag);

  // Blocking collectives.
  void allreduce(c10d::ProcessGroupGloo& group, torch::Tensor& tensor);
  void broadcast(c10d::ProcessGroupGloo& group, torch::Tensor& tensor, int root);
  void barrier();

 private:
  Topology topology_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> world_, pipeline_, data_, tensor_;
};

}  // namespace trainer
