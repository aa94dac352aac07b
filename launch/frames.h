// Length-delimited Protobuf frames for the launcher's control protocol:
// protobuf's own delimited format (a varint length, then the message),
// written and read with google::protobuf::util's delimited-message
// functions. FrameReader takes the bytes of a TCP stream as they come and
// hands out whole messages, refusing a frame longer than its bound before
// reading it.
#pragma once

#include <google/protobuf/message_lite.h>

#include <cstddef>
#include <string>

namespace gnnrt::launch {

// The frame of one message (length prefix included).
std::string encode_frame(const google::protobuf::MessageLite& message);

class FrameReader {
 public:
  explicit FrameReader(size_t max_frame_bytes) : max_frame_bytes_(max_frame_bytes) {}

  enum class Result { kNeedMore, kFrame, kBad };

  void append(const char* data, size_t n) { buffer_.append(data, n); }
  // The next whole frame parsed into `message` (kFrame), kNeedMore until one
  // is complete, or kBad with `error` saying why (a length over the bound, a
  // malformed length or message); after kBad the stream is unusable.
  Result next(google::protobuf::MessageLite& message, std::string& error);
  size_t buffered() const { return buffer_.size(); }

 private:
  size_t max_frame_bytes_;
  std::string buffer_;
};

}  // namespace gnnrt::launch
