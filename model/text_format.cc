#include "model/text_format.h"

#include <fmt/format.h>
#include <google/protobuf/text_format.h>

namespace gnnrt::model {

void TextFormatErrors::AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) {
  if (!first_.empty()) return;
  first_ = fmt::format("{}line {}, column {}: {}", source_.empty() ? "" : source_ + ": ", line + 1, column + 1, message);
}

std::string parse_text_format(std::string_view text, std::string_view source, google::protobuf::Message& message) {
  TextFormatErrors errors(source);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (parser.ParseFromString(std::string(text), &message)) return "";
  return errors.first().empty() ? fmt::format("{}{}does not parse", source, source.empty() ? "" : ": ") : errors.first();
}

}  // namespace gnnrt::model
