// .npy reading and writing: round trips of every dtype and rank, files
// written by NumPy itself (the golden data), and malformed files that must
// fail with a clear NpyError instead of a crash or a wrong array.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <string>

#include "runtime/npy.h"

namespace gnnrt {
namespace {

namespace fs = std::filesystem;

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("gnnrt_npy_test_" + std::to_string(::getpid()) + "_" + name);
}

template <typename T>
void expect_round_trip(std::vector<T> values, std::vector<int64_t> shape) {
  const fs::path p = temp_path("rt.npy");
  write_npy<T>(p, values, shape);
  const Tensor a = read_npy(p);
  fs::remove(p);
  EXPECT_EQ(a.dtype(), dtype_of<T>());
  EXPECT_EQ(a.shape(), shape);
  const auto got = a.values<T>();
  ASSERT_EQ(got.size(), values.size());
  if (!values.empty()) {
    EXPECT_EQ(std::memcmp(got.data(), values.data(), values.size() * sizeof(T)), 0);
  }
}

TEST(Npy, RoundTripsEveryDtypeAndRank) {
  expect_round_trip<float>({1.5f, -2.0f, 3.25f, 0.0f, 1e30f, -0.0f}, {2, 3});
  expect_round_trip<double>({1.0 / 3, -2.0}, {2});
  expect_round_trip<int32_t>({1, -2, 2147483647}, {3, 1});
  expect_round_trip<int64_t>({int64_t{1} << 40, -5}, {1, 2, 1});
  expect_round_trip<uint8_t>({1, 0, 1}, {3});
  expect_round_trip<float>({7.0f}, {});           // a 0-d scalar
  expect_round_trip<float>({}, {0, 5});           // empty
}

TEST(Npy, LongHeaderUsesVersion2) {
  std::vector<int64_t> shape(25000, 1);  // a header over 64 KiB
  expect_round_trip<float>({4.0f}, shape);
  const fs::path p = temp_path("v2.npy");
  write_npy<float>(p, std::vector<float>{4.0f}, shape);
  std::ifstream in(p, std::ios::binary);
  char head[8];
  in.read(head, 8);
  fs::remove(p);
  EXPECT_EQ(head[6], 2);
}

TEST(Npy, ReadsFilesWrittenByNumpy) {
  const Tensor a = read_npy(fs::path(GNNRT_GOLDEN_DIR) / "matmul" / "tall" / "a.npy");
  EXPECT_EQ(a.dtype(), DType::kF32);
  EXPECT_EQ(a.shape(), (std::vector<int64_t>{33, 5}));
  const Tensor m = read_npy(fs::path(GNNRT_GOLDEN_DIR) / "nll_loss" / "small" / "mask.npy");
  EXPECT_EQ(m.dtype(), DType::kBool);
  const Tensor i = read_npy(fs::path(GNNRT_GOLDEN_DIR) / "scatter" / "sum_duplicates" / "index.npy");
  EXPECT_EQ(i.dtype(), DType::kI32);
}

// A valid v1 header around `dict`, padded as NumPy pads it.
std::string npy_file(const std::string& dict, const std::string& data, char major = 1) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string f = "\x93NUMPY";
  f += major;
  f += '\0';
  f += static_cast<char>(header.size() & 0xff);
  f += static_cast<char>(header.size() >> 8);
  return f + header + data;
}

void expect_error(const std::string& file, const std::string& message) {
  try {
    parse_npy(std::as_bytes(std::span(file.data(), file.size())), "bad.npy");
    FAIL() << "parsed without error; expected: " << message;
  } catch (const NpyError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("bad.npy: ", 0), 0u) << e.what();
  }
}

TEST(Npy, MalformedFilesFailClearly) {
  const std::string ok_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const std::string eight(8, '\0');
  const std::string ok = npy_file(ok_dict, eight);
  EXPECT_EQ(parse_npy(std::as_bytes(std::span(ok.data(), ok.size())), "x").size(), 2);
  expect_error("hello world", "bad magic");
  expect_error("", "bad magic");
  expect_error(npy_file(ok_dict, eight, 9), "unsupported .npy format version 9");
  expect_error(npy_file(ok_dict, eight).substr(0, 40), "header is truncated");
  expect_error(npy_file(ok_dict, "1234"), "data has 4 bytes, shape (2) of float32 needs 8");
  expect_error(npy_file(ok_dict, eight + "x"), "data has 9 bytes");
  expect_error(npy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", eight),
               "big-endian dtype '>f4'");
  expect_error(npy_file("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", eight),
               "dtype '<c8' is not supported");
  expect_error(npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", eight),
               "Fortran-order");
  expect_error(npy_file("{'descr': '<f4', 'fortran_order': False, }", eight), "no 'shape' key");
  expect_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", eight),
               "non-numeric dimension");
  expect_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': 2, }", eight),
               "is not a tuple");
  expect_error(npy_file("not a dict at all", eight), "header is not a dict");
  expect_error(npy_file("{'fortran_order': False, 'shape': (2,), }", eight), "no 'descr' key");
  expect_error(npy_file("{'descr': '<f4', 'shape': (2,), }", eight), "no 'fortran_order' key");
  expect_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 1), }", eight),
               "shape '(-2, 1)' has a negative dimension");
  expect_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }", eight),
               "has a negative dimension");
  expect_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999, 99999999999), }", eight),
               "shape (99999999999, 99999999999, 99999999999) overflows");
}

TEST(Npy, WrongTypedViewThrows) {
  const Tensor a(DType::kI32, {3});
  EXPECT_THROW(a.values<float>(), TensorError);
  EXPECT_EQ(a.to_vector<double>().size(), 3u);
}

TEST(Npy, MissingFileNamesThePath) {
  try {
    read_npy("/nonexistent/dir/x.npy");
    FAIL();
  } catch (const NpyError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/x.npy"), std::string::npos);
  }
}

}  // namespace
}  // namespace gnnrt
