#include "model/sampling/seed_batches.h"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

#include "ops/rng.h"

namespace gnnrt::model {

SeedBatches::SeedBatches(std::vector<int32_t> seeds, int64_t batch_size, bool shuffle, bool drop_last, uint64_t seed)
    : seeds_(std::move(seeds)), batch_size_(batch_size), shuffle_(shuffle), drop_last_(drop_last), seed_(seed) {
  if (batch_size_ < 1) {
    throw std::invalid_argument(fmt::format("sampling.batch_size = {}: a batch holds at least one seed", batch_size_));
  }
  if (seeds_.empty()) throw std::invalid_argument("the training set is empty: no seed nodes to sample from");
  if (drop_last_ && num_seeds() < batch_size_) {
    throw std::invalid_argument(fmt::format(
        "sampling.drop_last with batch_size = {} and {} training seeds leaves no batch", batch_size_, num_seeds()));
  }
}

int64_t SeedBatches::batches_per_epoch() const {
  return drop_last_ ? num_seeds() / batch_size_ : (num_seeds() + batch_size_ - 1) / batch_size_;
}

std::vector<int32_t> SeedBatches::order(int64_t epoch) const {
  std::vector<int32_t> o = seeds_;
  if (!shuffle_) return o;
  // Fisher-Yates, draw i keyed by (seed, epoch, i).
  for (size_t i = o.size(); i > 1; --i) {
    const ops::RngWords r = ops::philox(seed_, kSeedOrderStream, {static_cast<uint64_t>(epoch), i, 0, 0});
    std::swap(o[i - 1], o[ops::below(r[0], i)]);
  }
  return o;
}

std::span<const int32_t> SeedBatches::batch(int64_t epoch, int64_t index) {
  if (epoch != order_epoch_) {
    order_ = order(epoch);
    order_epoch_ = epoch;
  }
  const auto at = static_cast<size_t>(index * batch_size_);
  return std::span<const int32_t>(order_).subspan(at, std::min(static_cast<size_t>(batch_size_), order_.size() - at));
}

}  // namespace gnnrt::model
