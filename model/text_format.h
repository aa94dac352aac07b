// Protobuf text format read with its errors in the caller's message: the
// job file and its --set values, a batch dataset's manifest, a shards
// folder's manifest.
#pragma once

#include <string>
#include <string_view>

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/message.h>

namespace gnnrt::model {

// Keeps a parser's first error with its place ("SOURCE: line L, column C:
// what", 1-based; without a source "line L, column C: what") instead of
// letting protobuf log it.
class TextFormatErrors : public google::protobuf::io::ErrorCollector {
 public:
  explicit TextFormatErrors(std::string_view source) : source_(source) {}
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override;
  const std::string& first() const { return first_; }

 private:
  std::string source_, first_;
};

// Parses `text` into `message`. Returns "" on success, else the first
// error with its place, for the caller's exception.
std::string parse_text_format(std::string_view text, std::string_view source, google::protobuf::Message& message);

}  // namespace gnnrt::model
