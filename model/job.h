// Jobs: read a job file (Protobuf text format, model/job.proto), apply
// command-line overrides (--set path=value), and check the result. Every
// error is a JobError naming the file (and line) or the override and the
// field. docs/job-format.md documents every field.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

#include "model/job.pb.h"

namespace gnnrt::model {

class JobError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

proto::Job parse_job(std::string_view text, std::string_view source);
proto::Job load_job(const std::filesystem::path& path);

// Sets one field: "optimizer.lr=0.005", "dataset.path=../shared/datasets/cora",
// "model.layer[1].out=32" (a repeated field's element by index; index = size
// appends one). Values use text-format syntax for their type.
void apply_override(proto::Job& job, std::string_view assignment);

// Checks values the schema cannot (layer types, ranges); throws JobError.
void validate(const proto::Job& job);

std::string to_text(const proto::Job& job);

}  // namespace gnnrt::model
