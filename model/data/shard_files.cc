#include "model/data/shard_files.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <google/protobuf/text_format.h>
#include <unistd.h>
#include <xxhash.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "model/text_format.h"
#include "runtime/atomic_file.h"
#include "runtime/npy.h"

namespace gnnrt::model::shard_files {
namespace {

constexpr const char* kRunFile = "run.txt";

// What each known format holds, for the error that meets the wrong one.
std::string_view holds(std::string_view format) {
  if (format == "gnnrt-shards-2") return "vertex-cut shards for full-graph training";
  if (format.starts_with("gnnrt-node-shards")) return "node shards for sampled training";
  return "";
}

}  // namespace

void fail(const fs::path& where, const std::string& what) {
  throw ShardError(fmt::format("{}: {}", where.string(), what));
}

std::string text_of(const google::protobuf::Message& m) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(m, &text);
  return text;
}

fs::path rank_dir(const fs::path& dir, int rank) { return dir / fmt::format("rank-{}", rank); }

uint64_t hash_bytes(std::span<const std::byte> bytes) { return XXH64(bytes.data(), bytes.size(), 0); }

void write_array(const fs::path& dir, const std::string& name, const Tensor& t, Listing& listing) {
  write_npy(dir / (name + ".npy"), t);
  proto::ShardArray* a = listing.Add();
  a->set_name(name);
  a->set_dtype(std::string(to_string(t.dtype())));
  for (int64_t d : t.shape()) a->add_shape(d);
  a->set_xxh64(hash_bytes(t.bytes()));
}

std::map<std::string, Tensor> read_arrays(const fs::path& dir, const Listing& listing) {
  std::map<std::string, Tensor> arrays;
  for (const proto::ShardArray& a : listing) {
    const fs::path file = dir / (a.name() + ".npy");
    if (!fs::exists(file)) fail(file, "missing");
    Tensor t;
    try {
      t = read_npy(file);
    } catch (const NpyError& e) {
      throw ShardError(e.what());  // names the file: truncated, not .npy, ...
    }
    const std::vector<int64_t> shape(a.shape().begin(), a.shape().end());
    if (to_string(t.dtype()) != a.dtype() || t.shape() != shape) {
      fail(file, fmt::format("is {} {}, the manifest says {} {}", to_string(t.dtype()),
                             fmt::join(t.shape(), "x"), a.dtype(), fmt::join(shape, "x")));
    }
    if (hash_bytes(t.bytes()) != a.xxh64()) {
      fail(file, fmt::format("checksum mismatch (xxh64 {:016x}, the manifest says {:016x}): the "
                             "file is corrupt", hash_bytes(t.bytes()), a.xxh64()));
    }
    arrays.emplace(a.name(), std::move(t));
  }
  return arrays;
}

void check_finite(const fs::path& file, const std::vector<float>& x, int64_t width) {
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) {
      fail(file, fmt::format("row {}, column {} is {}", i / static_cast<size_t>(width), i % static_cast<size_t>(width),
                             x[i]));
    }
  }
}

void write_run(const fs::path& rank_folder, uint64_t run) {
  write_file_atomically(rank_folder / kRunFile, fmt::format("{:016x}\n", run));
}

void check_run(const fs::path& rank_folder, uint64_t run) {
  std::ifstream in(rank_folder / kRunFile);
  std::string found;
  if (!(in >> found)) fail(rank_folder / kRunFile, "missing: this part of the shards is not there");
  const std::string expected = fmt::format("{:016x}", run);
  if (found != expected) {
    fail(rank_folder, fmt::format("belongs to another partition run ({}; the manifest's is {})", found, expected));
  }
}

fs::path partial_folder(const fs::path& dir) {
  const fs::path partial = dir.string() + fmt::format(".partial-{}", ::getpid());
  fs::remove_all(partial);
  fs::create_directories(partial);
  return partial;
}

void publish(const fs::path& partial, const fs::path& dir) {
  const fs::path old = dir.string() + fmt::format(".old-{}", ::getpid());
  fs::remove_all(old);
  if (fs::exists(dir)) fs::rename(dir, old);
  fs::rename(partial, dir);
  fs::remove_all(old);
}

proto::ShardManifest read_manifest(const fs::path& dir, std::string_view format) {
  const fs::path path = dir / kManifest;
  std::ifstream in(path);
  if (!in) {
    fail(path, fs::exists(dir) ? "missing: not a folder of shards written by `gnnrt partition`"
                               : "missing: the shards folder does not exist");
  }
  std::stringstream text;
  text << in.rdbuf();
  proto::ShardManifest m;
  if (const std::string error = parse_text_format(text.str(), "", m); !error.empty()) {
    fail(path, "does not parse: " + error);
  }
  if (m.format() != format) {
    if (!holds(m.format()).empty() && holds(m.format()) != holds(format)) {
      fail(path, fmt::format("holds {} ({}), this job reads {} ({}): run gnnrt partition on this job",
                             holds(m.format()), m.format(), holds(format), format));
    }
    fail(path, fmt::format("format '{}' is not {} (written by another version of gnnrt: partition "
                           "again)", m.format(), format));
  }
  if (m.rank_size() != m.parts()) {
    fail(path, fmt::format("lists {} ranks for {} parts", m.rank_size(), m.parts()));
  }
  return m;
}

}  // namespace gnnrt::model::shard_files
