#include "parallel.h"

#include <cstdlib>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

namespace trainer {

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

c10::intrusive_ptr<c10d::ProcessGroupGloo> make_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                      const std::string& name, int rank, int size) {
  auto options = c10d::ProcessGroupGloo::Options::create();
  // GLOO_SOCKET_IFNAME names the interface, as torch.distributed's does (a node whose hostname resolves to no
  // address of its own: a container, a namespace); else one node (the rendezvous on loopback) talks over loopback,
  // and several over the interface of this host's name.
  const std::string master = env_or("MASTER_ADDR", "127.0.0.1");
  const std::string interface = env_or("GLOO_SOCKET_IFNAME", "");
  options->devices.push_back(!interface.empty() ? c10d::ProcessGroupGloo::createDeviceForInterface(interface)
                             : master == "127.0.0.1" || master == "localhost"
                                 ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                 : c10d::ProcessGroupGloo::createDefaultDevice());
  options->timeout = std::chrono::minutes(5);
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name, store);
  return c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, options);
}

}  // namespace

bool hosts_rendezvous_store(const Topology& t) {
  // Under torchrun the agent already hosts the store at MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True).
  return t.rank == 0 && env_or("TORCHELASTIC_USE_AGENT_STORE", "False") != std::string("True");
}

c10::intrusive_ptr<c10d::Store> make_store(const Topology& t, StoreRole role) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(std::stoi(env_or("MASTER_PORT", "29500")));
  options.isServer = role == StoreRole::kRendezvous && hosts_rendezvous_store(t);
  options.numWorkers = static_cast<std::size_t>(t.world_size);
  options.waitWorkers = false;
  options.timeout = t.rendezvous_timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>(env_or("MASTER_ADDR", "127.0.0.1"), options);
  return c10::make_intrusive<c10d::PrefixStore>("pretrain_gpt/", store);
}

namespace {

std::string store_text(c10d::Store& store, const std::string& key) {
  const std::vector<std::uint8_t> bytes = store.get(key);
  return {bytes.begin(), bytes.end()};
}

}  // namespace

std::string error_message(const std::exception& e) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&e)) return torch_error->what_without_backtrace();
  return e.what();
}

void all_or_none(c10d::Store& store, const Topology& t, const std::string& name, const std::function<void()>& step,
                 std::chrono::milliseconds deadline) {
  const std::string ok = "setup/" + name + "/ok", failed = "setup/" + name + "/failed",
                    seen = "setup/" + name + "/seen";
  // Rank 0 hosts the store (unless a launcher's agent does): after a failure it leaves only once every rank has
  // read the message, or the others would lose the store instead of learning why.
  auto leave_after_failure = [&] {
    store.add(seen, 1);
    if (t.rank != 0) return;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (store.add(seen, 0) < t.world_size && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  try {
    step();
  } catch (const std::exception& e) {
    const std::string message = "rank " + std::to_string(t.rank) + ": " + error_message(e);
    store.set(failed, std::vector<std::uint8_t>(message.begin(), message.end()));
    leave_after_failure();
    throw;
  }
  store.add(ok, 1);
  const auto until = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    if (store.check({failed})) {
      const std::string message = store_text(store, failed);
      leave_after_failure();
      std::string what = name;
      throw SetupFailed(what.append(" failed on ").append(message));
    }
    if (store.add(ok, 0) == t.world_size) return;
    if (std::chrono::steady_clock::now() > until)
      throw SetupFailed(name + ": not every rank finished it within " + std::to_string(deadline.count()) + " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Parallel::Parallel(const Topology& t, c10::intrusive_ptr<c10d::Store> store) : topology_(t), store_(std::move(store)) {
  world_ = make_group(store_, "world/", t.rank, t.world_size);
  const std::string stage = std::to_string(t.stage()), data_rank = std::to_string(t.data_rank()),
                    tensor_rank = std::to_string(t.tensor_rank());
  pipeline_ = make_group(store_, "pipeline" + data_rank + "_" + tensor_rank + "/", t.stage(), t.pipeline_size);
  data_ = make_group(store_, "data" + stage + "_" + tensor_rank + "/", t.data_rank(), t.data_parallel_size);
  tensor_ = make_group(store_, "tensor" + stage + "_" + data_rank + "/", t.tensor_rank(), t.tensor_parallel_size);
}

c10::intrusive_ptr<c10d::Work> Parallel::send(const torch::Tensor& tensor, int stage_offset, Tag tag) {
  std::vector<torch::Tensor> tensors{tensor.contiguous()};
  return pipeline_->send(tensors, topology_.stage() + stage_offset, tag);
}

torch::Tensor Parallel::recv(at::IntArrayRef shape, int stage_offset, Tag tag) {
  std::vector<torch::Tensor> tensors{torch::empty(shape, torch::kFloat)};
  pipeline_->recv(tensors, topology_.stage() + stage_offset, tag)->wait();
  return tensors[0];
}

void Parallel::allreduce(c10d::ProcessGroupGloo& group, torch::Tensor& tensor) {
  std::vector<torch::Tensor> tensors{tensor};
  group.allreduce(tensors)->wait();
}

void Parallel::broadcast(c10d::ProcessGroupGloo& group, torch::Tensor& tensor, int root) {
  std::vector<torch::Tensor> tensors{tensor};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  group.broadcast(tensors, options)->wait();
}

void Parallel::barrier() { world_->barrier()->wait(); }

}  // namespace trainer
