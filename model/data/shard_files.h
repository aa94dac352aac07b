// The file layer both kinds of shard folder share (vertex-cut shards,
// model/data/shard.h; node shards, model/data/node_shard_files.h): a
// manifest (model/shard.proto, Protobuf text) beside one .npy per array,
// each listed with dtype, shape and xxHash64; a run id in every rank's
// folder; the whole set written into a fresh folder and renamed into place.
// Every failure is a ShardError naming the file and the problem.
#pragma once

#include <google/protobuf/repeated_ptr_field.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "model/shard.pb.h"
#include "model/job.h"
#include "model/text_format.h"
#include "runtime/tensor.h"

namespace gnnrt::model {

class ShardError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace gnnrt::model

namespace gnnrt::model::shard_files {

namespace fs = std::filesystem;
using Listing = google::protobuf::RepeatedPtrField<proto::ShardArray>;

inline constexpr const char* kManifest = "manifest.pbtxt";

[[noreturn]] void fail(const fs::path& where, const std::string& what);
std::string text_of(const google::protobuf::Message& m);
fs::path rank_dir(const fs::path& dir, int rank);
uint64_t hash_bytes(std::span<const std::byte> bytes);

// A manifest's record of the job's dataset or model as this gnnrt prints it
// (an older gnnrt quoted the enumerations); as recorded if it does not parse.
template <typename M>
std::string as_printed(const std::string& recorded) {
  M m;
  if (!parse_text_format(with_bare_enum_names(recorded), "", m).empty()) return recorded;
  return text_of(m);
}

template <typename T>
Tensor tensor_of(const std::vector<T>& v, std::vector<int64_t> shape) {
  return Tensor::from<T>(v, std::move(shape));
}

// Every value of `v` in [lo, hi), else ShardError naming `file` and the row.
template <typename T>
void check_range(const fs::path& file, const std::vector<T>& v, int64_t lo, int64_t hi) {
  for (size_t i = 0; i < v.size(); ++i) {
    const auto x = static_cast<int64_t>(v[i]);
    if (x < lo || x >= hi) {
      fail(file, "row " + std::to_string(i) + " holds " + std::to_string(x) + ", outside [" + std::to_string(lo) +
                     ", " + std::to_string(hi) + ")");
    }
  }
}

// Every value of the [rows, width] matrix `x` finite, else ShardError
// naming `file`, the row and the column.
void check_finite(const fs::path& file, const std::vector<float>& x, int64_t width);

// Writes `t` as dir/<name>.npy and lists it (dtype, shape, checksum).
void write_array(const fs::path& dir, const std::string& name, const Tensor& t, Listing& listing);
// The arrays `listing` names in `dir`, each checked against its dtype,
// shape and checksum.
std::map<std::string, Tensor> read_arrays(const fs::path& dir, const Listing& listing);

void write_run(const fs::path& rank_folder, uint64_t run);
// rank_folder/run.txt holds `run`: no rank folder of another partition run.
void check_run(const fs::path& rank_folder, uint64_t run);

// A fresh folder beside `dir` to write the set into, then renamed over `dir`.
fs::path partial_folder(const fs::path& dir);
void publish(const fs::path& partial, const fs::path& dir);

// dir's manifest, which must be of `format` (another known format is named
// for what it holds).
proto::ShardManifest read_manifest(const fs::path& dir, std::string_view format);

// Arrays read by read_arrays, each taken once in the dtype the writer
// wrote (no narrowing: an int64 edited into an int32 array must not wrap
// into range) and dropped at once, so one copy of the data lives at a time.
class Arrays {
 public:
  Arrays(std::map<std::string, Tensor> arrays, fs::path folder, fs::path manifest, int rank)
      : arrays_(std::move(arrays)), folder_(std::move(folder)), manifest_(std::move(manifest)), rank_(rank) {}
  template <typename T>
  std::vector<T> take(const std::string& name);
  const fs::path& folder() const { return folder_; }

 private:
  std::map<std::string, Tensor> arrays_;
  fs::path folder_, manifest_;
  int rank_;
};

template <typename T>
std::vector<T> Arrays::take(const std::string& name) {
  auto it = arrays_.find(name);
  if (it == arrays_.end()) {
    fail(manifest_, rank_ < 0 ? "lists no common array '" + name + "'"
                              : "rank " + std::to_string(rank_) + " has no array '" + name + "'");
  }
  if (it->second.dtype() != dtype_of<T>()) {
    fail(folder_ / (name + ".npy"), "is " + std::string(to_string(it->second.dtype())) + ", a shard's " + name +
                                        " is " + std::string(to_string(dtype_of<T>())));
  }
  std::vector<T> v = it->second.template to_vector<T>();
  arrays_.erase(it);
  return v;
}

}  // namespace gnnrt::model::shard_files
