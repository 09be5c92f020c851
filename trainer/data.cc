#include "data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

namespace trainer {

Corpus load_corpus(const std::string& data_path) {
  std::string text;
  auto append = [&](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    text.append(std::istreambuf_iterator<char>(in), {});
  };
  // By default the project's own documentation, real English prose, as it was when the build was configured
  // (trainer/CMakeLists.txt): what a run reads does not change while the docs are edited.
  append(data_path.empty() ? std::filesystem::path(LENS_TRAINER_CORPUS) : std::filesystem::path(data_path));
  Corpus c;
  const std::size_t split = text.size() * 9 / 10;
  c.train.assign(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(split));
  c.valid.assign(text.begin() + static_cast<std::ptrdiff_t>(split), text.end());
  return c;
}

torch::Tensor batch_of(const std::vector<std::uint8_t>& data, const Args& a, std::int64_t iteration, int data_rank,
                       std::int64_t micro, std::uint64_t stream) {
  std::seed_seq seq{static_cast<std::uint64_t>(a.seed), static_cast<std::uint64_t>(iteration),
                    static_cast<std::uint64_t>(data_rank), static_cast<std::uint64_t>(micro), stream};
  std::mt19937_64 rng(seq);
  const std::int64_t span = a.seq_length + 1;
  std::uniform_int_distribution<std::size_t> start(0, data.size() - static_cast<std::size_t>(span));
  auto out = torch::empty({a.micro_batch_size, span}, torch::kLong);
  auto* p = out.data_ptr<std::int64_t>();
  for (int b = 0; b < a.micro_batch_size; ++b) {
    const std::size_t at = start(rng);
    for (std::int64_t i = 0; i < span; ++i) *p++ = data[at + static_cast<std::size_t>(i)];
  }
  return out;
}

}  // namespace trainer
