// Startup is where a dead rank costs the most: until the process groups are connected nothing notices it, and
// the others wait for a rendezvous or Gloo timeout (2-5 minutes) with a message that names no one. A StartupWatch
// beats for this rank in the rendezvous store, from a connection of its own; rank 0's reads every rank's beat,
// every rank's reads the verdict (O(ranks) store operations a beat): a beat that stops for kSilence ends every rank at
// once with a message naming it (rank, host, pid, and the step of startup it was in); one that never beat at all
// is named kJoinMargin before the store's timeout. The watch ends when every rank has finished startup (from then
// on, Gloo's connections notice a dead peer).
//
//   trainer::StartupWatch watch(topology, store);
//   watch.enter("telemetry setup");
//   ... set telemetry up ...
//   watch.before_ending([&] { telemetry.force_flush(); });
//   ...
//   watch.finished();
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "parallel.h"

namespace trainer {

class StartupWatch {
 public:
  static constexpr std::chrono::seconds kSilence{15};
  // How long before the rendezvous store's own timeout (Topology::rendezvous_timeout, 2 minutes) a rank that never
  // joined is named: the store's timeout would end the ranks waiting for it with c10d's message, naming no one.
  static constexpr std::chrono::seconds kJoinMargin{20};
  static constexpr std::chrono::milliseconds kBeat{1000};
  static constexpr std::int64_t kFinishedBeat = std::int64_t{1} << 40;  // added to a rank's beat when it is done

  // `store` is the main thread's connection to the rendezvous (enter() and finished() use it); the watch opens
  // one of its own.
  StartupWatch(const Topology& topology, c10::intrusive_ptr<c10d::Store> store);
  StartupWatch(const StartupWatch&) = delete;
  ~StartupWatch();

  // The step of startup this rank is in, for the others' message should it die.
  void enter(const std::string& step);
  // This rank has finished startup.
  void finished();
  // Runs on the watch's thread before it ends the process (flush telemetry there).
  void before_ending(std::function<void()> last_words);
  // Runs `step` (a connection to the other ranks). If it throws (a peer that died resets the connection), waits
  // long enough for the watch to name a rank that stopped, which ends this one with that message; otherwise
  // rethrows. The verdict comes kSilence after the dead rank's last beat that rank 0 saw, and reaches this rank
  // a beat later; under load each beat is late: twice kSilence leaves room (kSilence + 4 beats is too short on a
  // loaded machine, which then ends ranks with the connection's error instead of the verdict).
  template <typename Step>
  auto naming_the_dead(Step&& step) -> decltype(step()) {
    try {
      return step();
    } catch (const std::exception&) {
      std::this_thread::sleep_for(2 * kSilence + 4 * kBeat);
      throw;
    }
  }

 private:
  void run();
  [[noreturn]] void give_verdict(const std::string& why);
  [[noreturn]] void end_rank(const std::string& why);

  const Topology topology_;
  const bool hosts_store_;
  std::mutex mutex_;  // guards last_words_
  std::function<void()> last_words_;
  c10::intrusive_ptr<c10d::Store> main_store_;
  c10::intrusive_ptr<c10d::Store> store_;  // the watch's own connection: a c10d store is used from one thread
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};  // this rank's startup is over
  std::thread thread_;
};

}  // namespace trainer
