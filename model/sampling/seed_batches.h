// The global batches of seed nodes of a sampled epoch (docs/sampling.md):
// the training seeds in an order drawn from (seed, epoch), or as given
// without shuffling, cut into batches of batch_size (the last one partial,
// or dropped with drop_last). The same batches at any rank count; rank r
// takes share(batch, r, R), a contiguous run, the shares differing by at
// most one seed (possibly none: that rank still takes the step).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace gnnrt::model {

inline constexpr uint64_t kSeedOrderStream = 0x736565646f72;  // "seedor"

class SeedBatches {
 public:
  // Throws std::invalid_argument for batch_size < 1 or no seeds.
  SeedBatches(std::vector<int32_t> seeds, int64_t batch_size, bool shuffle, bool drop_last, uint64_t seed);

  int64_t batch_size() const { return batch_size_; }
  int64_t num_seeds() const { return static_cast<int64_t>(seeds_.size()); }
  int64_t batches_per_epoch() const;
  // Global batch `index` of `epoch` (valid until the next call with another epoch).
  std::span<const int32_t> batch(int64_t epoch, int64_t index);
  // The epoch's order of the seeds.
  std::vector<int32_t> order(int64_t epoch) const;

  template <typename T>
  static std::span<const T> share(std::span<const T> batch, int rank, int ranks) {
    const size_t n = batch.size(), r = static_cast<size_t>(rank), k = static_cast<size_t>(ranks);
    const size_t begin = n * r / k, end = n * (r + 1) / k;
    return batch.subspan(begin, end - begin);
  }

 private:
  std::vector<int32_t> seeds_;
  int64_t batch_size_;
  bool shuffle_, drop_last_;
  uint64_t seed_;
  std::vector<int32_t> order_;
  int64_t order_epoch_ = -1;
};

}  // namespace gnnrt::model
