// --async-save: a worker process that writes checkpoint files while training goes on (CONTRACT §9). A saving rank
// starts one (this same program with --checkpoint-worker), serializes its state in memory and hands the bytes
// over a pipe, with lens's worker bootstrap: the worker reports as its rank, with the same resource, and links
// its spans (nvrx.checkpoint.save.request > nvrx.checkpoint.save.write, group checkpoint) to the rank's
// megatron.save_checkpoint. Each request is answered with one status byte once its file is in place.
#pragma once

#include <sys/types.h>

#include <string>

namespace trainer {

class CheckpointWorker {
 public:
  CheckpointWorker();   // starts the worker process
  ~CheckpointWorker();  // ends it (closes its input; it flushes its telemetry and exits) and reaps it
  CheckpointWorker(const CheckpointWorker&) = delete;
  CheckpointWorker& operator=(const CheckpointWorker&) = delete;

  // Hands one file over: written to `path` (through `path`.tmp and a rename) by the worker.
  void submit(const std::string& bootstrap, const std::string& path, const std::string& bytes);
  // Waits for the answer to the oldest submitted file; false when the worker failed or is gone.
  bool wait_written();

 private:
  // "the checkpoint worker (pid N) was killed by signal 9": why it is gone, for the error message.
  std::string gone() const;

  pid_t pid_ = -1;
  int to_worker_ = -1, from_worker_ = -1;
};

// The worker's main loop (pretrain_gpt --checkpoint-worker): reads requests from fd 3, answers on fd 4, until
// fd 3 closes. Returns the exit code.
int run_checkpoint_worker();

}  // namespace trainer
