// The training text of pretrain_gpt: the bytes of a file (default: the project's README and docs), 90 % for
// training and 10 % held out, and the batches drawn from them, deterministic in (seed, iteration, data-parallel
// rank, micro-batch) so that a resumed run sees what an uninterrupted one would.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "args.h"

namespace trainer {

// Byte-level text: the first 90 % trains, the rest evaluates.
struct Corpus {
  std::vector<std::uint8_t> train, valid;
};

// The bytes of `data_path` (empty: the project's docs as the build was configured with them), split.
Corpus load_corpus(const std::string& data_path);

// Micro-batch `micro` of iteration `iteration` on data-parallel rank `data_rank`: [batch, seq + 1] token ids,
// the same on every stage of a pipeline (stage 0 takes the inputs, the last stage the targets). Deterministic
// in (seed, iteration, rank, micro): a resumed run sees the batches an uninterrupted one would.
torch::Tensor batch_of(const std::vector<std::uint8_t>& data, const Args& a, std::int64_t iteration, int data_rank,
                       std::int64_t micro, std::uint64_t stream);

}  // namespace trainer
