#include "launch/frames.h"

#include <fmt/format.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/delimited_message_util.h>

namespace gnnrt::launch {

namespace io = google::protobuf::io;

std::string encode_frame(const google::protobuf::MessageLite& message) {
  std::string out;
  {
    io::StringOutputStream stream(&out);
    google::protobuf::util::SerializeDelimitedToZeroCopyStream(message, &stream);
  }
  return out;
}

FrameReader::Result FrameReader::next(google::protobuf::MessageLite& message, std::string& error) {
  if (buffer_.empty()) return Result::kNeedMore;
  // The length prefix first: a varint of at most 5 bytes.
  uint32_t length = 0;
  size_t prefix = 0;
  {
    io::CodedInputStream in(reinterpret_cast<const uint8_t*>(buffer_.data()),
                            static_cast<int>(std::min<size_t>(buffer_.size(), 5)));
    if (!in.ReadVarint32(&length)) {
      if (buffer_.size() < 5) return Result::kNeedMore;
      error = "malformed frame length";
      return Result::kBad;
    }
    prefix = static_cast<size_t>(in.CurrentPosition());
  }
  if (length > max_frame_bytes_) {
    error = fmt::format("frame of {} bytes exceeds the limit of {}", length, max_frame_bytes_);
    return Result::kBad;
  }
  if (buffer_.size() < prefix + length) return Result::kNeedMore;
  io::ArrayInputStream stream(buffer_.data(), static_cast<int>(prefix + length));
  bool clean_eof = false;
  if (!google::protobuf::util::ParseDelimitedFromZeroCopyStream(&message, &stream, &clean_eof)) {
    error = fmt::format("malformed message in a frame of {} bytes", length);
    return Result::kBad;
  }
  buffer_.erase(0, prefix + length);
  return Result::kFrame;
}

}  // namespace gnnrt::launch
