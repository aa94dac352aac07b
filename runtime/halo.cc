#include "runtime/halo.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace gnnrt::runtime {

using collectives::HaloExchange;
using collectives::ReduceOp;

std::string_view name(HaloMode mode) { return mode == HaloMode::sparse ? "sparse" : "dense"; }

Halo::Halo(collectives::Communicator comm, const collectives::MirrorTable& mirrors,
           std::vector<int64_t> global_id, int64_t num_global, HaloMode mode)
    : comm_(std::move(comm)),
      exchange_(std::make_unique<HaloExchange>(comm_, mirrors, static_cast<int64_t>(global_id.size()))),
      global_id_(std::move(global_id)),
      num_global_(num_global),
      mode_(mode) {
  for (size_t i = 0; i < global_id_.size(); ++i) {
    if (global_id_[i] < 0 || global_id_[i] >= num_global_) {
      throw std::invalid_argument(fmt::format("rank {}: halo: local row {} has global id {} outside [0, {})",
                                              comm_.rank(), i, global_id_[i], num_global_));
    }
  }
}

double Halo::bytes_sent() const {
  return static_cast<double>(mode_ == HaloMode::dense ? dense_bytes_ : exchange_->bytes_sent());
}

namespace {

// Dense mode: the local rows scattered into a `fill` global matrix,
// all-reduced, and the local rows read back.
template <typename T>
void dense_reduce(collectives::Communicator& comm, std::span<const int64_t> global_id,
                  std::span<T> global, std::span<T> rows, int64_t features, ReduceOp op, T fill) {
  const auto f = static_cast<size_t>(features);
  std::fill(global.begin(), global.end(), fill);
  for (size_t i = 0; i < global_id.size(); ++i) {
    std::copy_n(rows.data() + i * f, f, global.data() + static_cast<size_t>(global_id[i]) * f);
  }
  comm.allreduce<T>(global, op);
  for (size_t i = 0; i < global_id.size(); ++i) {
    std::copy_n(global.data() + static_cast<size_t>(global_id[i]) * f, f, rows.data() + i * f);
  }
}

// Dense keyed max/min of float32: value and key in one int64 whose order is
// the keyed rule's (a NaN above every number, then the value, then the
// smaller key), so one all-reduce max decides; an absent key is INT64_MIN.
int64_t encode(float v, int64_t key, bool max) {
  if (key == HaloExchange::kNoKey) return std::numeric_limits<int64_t>::min();
  if (key < 0 || key > 0xffffffffll) {
    throw std::invalid_argument(fmt::format("dense halo mode: edge id {} exceeds 2^32", key));
  }
  uint32_t ord;
  if (v != v) {
    ord = 0xffffffffu;
  } else {
    if (!max) v = -v;
    const auto bits = std::bit_cast<uint32_t>(v == 0.0f ? 0.0f : v);  // -0 ties with +0
    ord = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
  }
  const uint64_t code = (static_cast<uint64_t>(ord) << 32) | (0xffffffffu - static_cast<uint64_t>(key));
  return static_cast<int64_t>(code ^ 0x8000000000000000ull);  // unsigned order as signed
}

}  // namespace

template <typename T>
std::span<T> Halo::dense_buffer(std::size_t count, std::size_t offset_bytes) {
  const std::size_t end = offset_bytes + count * sizeof(T);
  if (dense_.size() < end) dense_.resize(end);
  return {reinterpret_cast<T*>(dense_.data() + offset_bytes), count};
}

template <typename T>
void Halo::sum(std::span<T> rows, int64_t features) {
  if (mode_ == HaloMode::dense) {
    const std::span<T> global = dense_buffer<T>(static_cast<size_t>(num_global_ * features));
    dense_reduce<T>(comm_, global_id_, global, rows, features, ReduceOp::sum, T(0));
    dense_bytes_ += global.size_bytes();
    return;
  }
  exchange_->run<T>(rows, features, ReduceOp::sum);
}

template <typename T>
void Halo::max(std::span<T> rows, int64_t features) {
  if (mode_ == HaloMode::dense) {
    const std::span<T> global = dense_buffer<T>(static_cast<size_t>(num_global_ * features));
    dense_reduce<T>(comm_, global_id_, global, rows, features, ReduceOp::max,
                    -std::numeric_limits<T>::infinity());
    dense_bytes_ += global.size_bytes();
    return;
  }
  exchange_->run<T>(rows, features, ReduceOp::max);
}

template <typename T>
void Halo::keyed(std::span<T> values, std::span<int64_t> keys, int64_t features, bool max) {
  if (mode_ == HaloMode::sparse) {
    exchange_->start_keyed<T>(values, keys, features, max ? ReduceOp::max : ReduceOp::min).wait();
    return;
  }
  if constexpr (!std::is_same_v<T, float>) {
    throw std::invalid_argument("dense halo mode: a max/min aggregation runs in float32 only");
  } else {
    // Pass 1: the winning (value, key) code per element; pass 2: the value
    // of the winner, from the rank holding it (a sum: one rank contributes).
    const auto f = static_cast<size_t>(features);
    const auto n = static_cast<size_t>(num_global_) * f;
    dense_buffer<std::byte>(n * (2 * sizeof(int64_t) + sizeof(float)));  // one allocation for the three
    const std::span<int64_t> code = dense_buffer<int64_t>(n);
    const std::span<int64_t> key = dense_buffer<int64_t>(n, n * sizeof(int64_t));
    const std::span<float> value = dense_buffer<float>(n, 2 * n * sizeof(int64_t));
    std::fill(code.begin(), code.end(), std::numeric_limits<int64_t>::min());
    for (size_t i = 0; i < global_id_.size(); ++i) {
      for (size_t c = 0; c < f; ++c) {
        code[static_cast<size_t>(global_id_[i]) * f + c] = encode(values[i * f + c], keys[i * f + c], max);
      }
    }
    comm_.allreduce<int64_t>(code, ReduceOp::max);
    std::fill(value.begin(), value.end(), 0.0f);
    std::fill(key.begin(), key.end(), 0);
    for (size_t i = 0; i < global_id_.size(); ++i) {
      for (size_t c = 0; c < f; ++c) {
        const size_t g = static_cast<size_t>(global_id_[i]) * f + c;
        if (keys[i * f + c] != HaloExchange::kNoKey &&
            code[g] == encode(values[i * f + c], keys[i * f + c], max)) {
          value[g] = values[i * f + c];
          key[g] = keys[i * f + c] + 1;  // + 1: key 0 stays distinguishable from none
        }
      }
    }
    // Exactly one rank holds each winning edge, so the sums are its values.
    comm_.allreduce<int64_t>(key, ReduceOp::sum);
    comm_.allreduce<float>(value, ReduceOp::sum);
    dense_bytes_ += code.size_bytes() + key.size_bytes() + value.size_bytes();
    for (size_t i = 0; i < global_id_.size(); ++i) {
      for (size_t c = 0; c < f; ++c) {
        const size_t g = static_cast<size_t>(global_id_[i]) * f + c;
        values[i * f + c] = key[g] == 0 ? 0.0f : value[g];
        keys[i * f + c] = key[g] == 0 ? HaloExchange::kNoKey : key[g] - 1;
      }
    }
  }
}

template void Halo::sum<float>(std::span<float>, int64_t);
template void Halo::sum<double>(std::span<double>, int64_t);
template void Halo::max<float>(std::span<float>, int64_t);
template void Halo::max<double>(std::span<double>, int64_t);
template void Halo::keyed<float>(std::span<float>, std::span<int64_t>, int64_t, bool);
template void Halo::keyed<double>(std::span<double>, std::span<int64_t>, int64_t, bool);

}  // namespace gnnrt::runtime
