#include "startup_watch.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "whereabouts.h"

namespace trainer {

namespace {

std::string key(const char* what, int rank) { return std::string("startup/") + what + "/" + std::to_string(rank); }

std::vector<std::uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }

std::string text_or(c10d::Store& store, const std::string& name, const std::string& fallback) {
  if (!store.check({name})) return fallback;
  const std::vector<std::uint8_t> value = store.get(name);
  return {value.begin(), value.end()};
}

}  // namespace

StartupWatch::StartupWatch(const Topology& topology, c10::intrusive_ptr<c10d::Store> store)
    : topology_(topology), hosts_store_(hosts_rendezvous_store(topology)), main_store_(std::move(store)) {
  // The first beat before anything else: a rank that has beaten once is known to have joined.
  main_store_->set(key("who", topology_.rank), bytes(host_name() + ", pid " + std::to_string(::getpid())));
  main_store_->add(key("beat", topology_.rank), 1);
  publish_whereabouts(*main_store_, topology_.rank);
  store_ = make_store(topology_, StoreRole::kClient);
  thread_ = std::thread([this] { run(); });
}

StartupWatch::~StartupWatch() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void StartupWatch::before_ending(std::function<void()> last_words) {
  std::lock_guard lock(mutex_);
  last_words_ = std::move(last_words);
}

void StartupWatch::enter(const std::string& step) { main_store_->set(key("step", topology_.rank), bytes(step)); }

void StartupWatch::finished() {
  enter("finished");
  main_store_->add(key("beat", topology_.rank), kFinishedBeat);  // no longer watched
  main_store_->add("startup/finished", 1);
  finished_.store(true);
}

// Every rank beats and looks for a verdict (two store operations a beat); only rank 0 reads every rank's beat,
// so the store serves O(ranks) operations a beat, not O(ranks^2). Should rank 0 die, the store goes with it
// (or, under a launcher's agent, its beat stops) and the others say so.
void StartupWatch::run() {
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  const std::chrono::seconds join_deadline = topology_.rendezvous_timeout - kJoinMargin;
  std::vector<std::int64_t> beats(topology_.world_size, 0);
  std::vector<Clock::time_point> changed(topology_.world_size, started);
  try {
    while (!stop_.load()) {
      store_->add(key("beat", topology_.rank), 1);
      if (store_->check({"startup/verdict"})) end_rank(text_or(*store_, "startup/verdict", "?"));
      if (store_->add("startup/finished", 0) >= topology_.world_size) return;
      if (topology_.rank == 0) {
        const auto now = Clock::now();
        for (int r = 1; r < topology_.world_size; ++r) {
          const std::int64_t beat = store_->add(key("beat", r), 0);
          if (beat >= kFinishedBeat) continue;
          if (beat != beats[r]) {
            beats[r] = beat;
            changed[r] = now;
          } else if (beat > 0 && now - changed[r] > kSilence) {
            give_verdict("rank " + std::to_string(r) + " (" + text_or(*store_, key("who", r), "?") +
                         ") stopped answering during startup, in " +
                         text_or(*store_, key("step", r), "its first step") + ": it has died or hangs; see its output");
          } else if (beat == 0 && now - started > join_deadline) {
            give_verdict("rank " + std::to_string(r) + " never joined the rendezvous within " +
                         std::to_string(join_deadline.count()) + " s");
          }
        }
      }
      std::this_thread::sleep_for(kBeat);
    }
  } catch (const std::exception& e) {
    // Past this rank's startup a lost store is not the watch's to report: the rank hosting it may simply have
    // finished a short run first, and a peer that dies now breaks a Gloo connection, which says so.
    if (stop_.load() || finished_.load()) return;
    end_rank(
        "lost the rendezvous store (hosted by rank 0 or the launcher's agent), so rank 0 or the agent has "
        "stopped: " +
        error_message(e));
  }
}

// The first rank to see a silent one tells the others through the store, so that every rank ends with the same
// message rather than with "lost the store" when the rank hosting it ends first.
void StartupWatch::give_verdict(const std::string& why) {
  store_->set("startup/verdict", bytes(why));
  end_rank(why);
}

void StartupWatch::end_rank(const std::string& why) {
  std::fprintf(stderr, "pretrain_gpt: rank %d ends: %s\n", topology_.rank, why.c_str());
  std::fflush(stderr);
  try {  // the rank hosting the store leaves once the others have read the verdict (at most 5 s)
    store_->add("startup/verdict_seen", 1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (hosts_store_ && store_->add("startup/verdict_seen", 0) < topology_.world_size - 1 &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } catch (...) {
  }
  try {
    std::lock_guard lock(mutex_);
    if (last_words_) last_words_();
  } catch (...) {
  }
  // The main thread is blocked in a rendezvous or a connection: the process ends here, without unwinding it.
  std::_Exit(1);
}

}  // namespace trainer
