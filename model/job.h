// Jobs: read a job file (Protobuf text format, model/job.proto), apply
// command-line overrides (--set path=value), and check the result. Every
// error is a JobError naming the file (and line) or the override and the
// field. docs/job-format.md documents every field.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "model/job.pb.h"

namespace gnnrt::model {

class JobError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Older job files, and the jobs recorded in older checkpoints and shard
// manifests, wrote the enumerations as quoted lower-case strings
// (kind: "adam"): parse_job reads them as the bare names (kind: ADAM).
proto::Job parse_job(std::string_view text, std::string_view source);

// `text` with every quoted value of a job's enumeration field made its bare
// upper-case name, the rest unchanged.
std::string with_bare_enum_names(std::string_view text);
proto::Job load_job(const std::filesystem::path& path);

// Sets one field: "optimizer.lr=0.005", "dataset.path=../shared/datasets/cora",
// "model.layer[1].out=32" (a repeated field's element by index; index = size
// appends one). Values use text-format syntax for their type.
void apply_override(proto::Job& job, std::string_view assignment);

// An enumeration's value by its name in any case ("sgd" for SGD); null if
// none. enum_names_lower: every value's name in lower case (the command
// line's spelling).
const google::protobuf::EnumValueDescriptor* enum_value_named(const google::protobuf::EnumDescriptor* e,
                                                              std::string_view name);
std::vector<std::string> enum_names_lower(const google::protobuf::EnumDescriptor* e);
std::string lower_name(const google::protobuf::EnumDescriptor* e, int value);
// The same for a job's enumeration value: "adam" for Optimizer::ADAM.
template <class Enum>
std::string lower_name(Enum value) {
  return lower_name(google::protobuf::GetEnumDescriptor<Enum>(), static_cast<int>(value));
}

// Checks values the schema cannot (a layer without a type, ranges); throws
// JobError.
void validate(const proto::Job& job);

std::string to_text(const proto::Job& job);

// Why the model cannot take sparse features ("" if it can): its first layer
// after any dropout must start with a linear map of its input (gcn, gat,
// linear, gin, sage with mean aggregation).
std::string sparse_features_unsupported(const proto::Model& model);

}  // namespace gnnrt::model
