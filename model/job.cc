#include "model/job.h"

#include <fmt/format.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "model/text_format.h"

namespace gnnrt::model {
namespace {

namespace pb = google::protobuf;

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (;;) {
    const size_t end = s.find(sep, start);
    parts.push_back(s.substr(start, end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

// The first floating-point field of `m` (set, at any depth) that is NaN or
// infinite, as "path = value"; "" when there is none.
std::string first_non_finite(const pb::Message& m, const std::string& prefix) {
  const pb::Reflection* r = m.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const pb::FieldDescriptor* f : fields) {
    const std::string name = prefix + f->name();
    const int n = f->is_repeated() ? r->FieldSize(m, f) : 1;
    for (int k = 0; k < n; ++k) {
      const std::string at = f->is_repeated() ? fmt::format("{}[{}]", name, k) : name;
      double v = 0;
      switch (f->cpp_type()) {
        case pb::FieldDescriptor::CPPTYPE_MESSAGE: {
          const pb::Message& sub = f->is_repeated() ? r->GetRepeatedMessage(m, f, k) : r->GetMessage(m, f);
          if (std::string bad = first_non_finite(sub, at + "."); !bad.empty()) return bad;
          continue;
        }
        case pb::FieldDescriptor::CPPTYPE_DOUBLE:
          v = f->is_repeated() ? r->GetRepeatedDouble(m, f, k) : r->GetDouble(m, f);
          break;
        case pb::FieldDescriptor::CPPTYPE_FLOAT:
          v = f->is_repeated() ? r->GetRepeatedFloat(m, f, k) : r->GetFloat(m, f);
          break;
        default:
          continue;
      }
      if (!std::isfinite(v)) return fmt::format("{} = {}", at, v);
    }
  }
  return "";
}

}  // namespace

namespace {

// The names of the job's enumeration fields (in every message a job holds),
// less any name that is also a string field somewhere in it.
void collect_enum_fields(const pb::Descriptor* d, std::set<const pb::Descriptor*>& seen, std::set<std::string>& enums,
                         std::set<std::string>& strings) {
  if (!seen.insert(d).second) return;
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_ENUM) enums.insert(f->name());
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING) strings.insert(f->name());
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) collect_enum_fields(f->message_type(), seen, enums, strings);
  }
}

// The names of the job's enumeration fields, less those also of string fields.
const std::set<std::string, std::less<>>& enum_field_names() {
  static const std::set<std::string, std::less<>> names = [] {
    std::set<const pb::Descriptor*> seen;
    std::set<std::string> enums, strings;
    collect_enum_fields(proto::Job::descriptor(), seen, enums, strings);
    std::set<std::string, std::less<>> only;
    for (const std::string& n : enums) {
      if (!strings.count(n)) only.insert(n);
    }
    return only;
  }();
  return names;
}

bool identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

}  // namespace

std::string with_bare_enum_names(std::string_view text) {
  // A hand-written scan: std::regex trips GCC 12's maybe-uninitialized
  // warnings under the sanitizers.
  const auto& names = enum_field_names();
  std::string out;
  out.reserve(text.size());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (!identifier_char(text[i]) || (i > 0 && identifier_char(text[i - 1]))) {
      out += text[i++];
      continue;
    }
    size_t j = i;
    while (j < n && identifier_char(text[j])) ++j;
    size_t colon = j;
    while (colon < n && (text[colon] == ' ' || text[colon] == '\t')) ++colon;
    if (names.count(text.substr(i, j - i)) && colon < n && text[colon] == ':') {
      size_t open = colon + 1;
      while (open < n && (text[open] == ' ' || text[open] == '\t')) ++open;
      size_t close = open + 1;
      while (close < n && identifier_char(text[close])) ++close;
      if (open < n && text[open] == '"' && close < n && text[close] == '"' && close > open + 1) {
        out.append(text.substr(i, open - i));
        for (size_t k = open + 1; k < close; ++k) out += static_cast<char>(std::toupper(static_cast<unsigned char>(text[k])));
        i = close + 1;
        continue;
      }
    }
    out.append(text.substr(i, j - i));
    i = j;
  }
  return out;
}

proto::Job parse_job(std::string_view text, std::string_view source) {
  proto::Job job;
  if (const std::string error = parse_text_format(with_bare_enum_names(text), source, job); !error.empty()) {
    throw JobError(error);
  }
  return job;
}

proto::Job load_job(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw JobError(fmt::format("{}: cannot open the job file", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  return parse_job(text.str(), path.string());
}

const pb::EnumValueDescriptor* enum_value_named(const pb::EnumDescriptor* e, std::string_view name) {
  for (int i = 0; i < e->value_count(); ++i) {
    const std::string& n = e->value(i)->name();
    if (n.size() == name.size() &&
        std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) { return a == std::toupper(static_cast<unsigned char>(b)); })) {
      return e->value(i);
    }
  }
  return nullptr;
}

std::string lower_name(const pb::EnumDescriptor* e, int value) {
  const pb::EnumValueDescriptor* v = e->FindValueByNumber(value);
  std::string n = v ? v->name() : std::to_string(value);
  for (char& ch : n) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return n;
}

std::vector<std::string> enum_names_lower(const pb::EnumDescriptor* e) {
  std::vector<std::string> names;
  for (int i = 0; i < e->value_count(); ++i) names.push_back(lower_name(e, e->value(i)->number()));
  return names;
}

// A repeated scalar field's elements from "a,b,c" (or "[a, b, c]"; empty:
// none), each by the text-format rules of its type.
void set_list(pb::Message* message, const pb::FieldDescriptor* field, std::string_view assignment,
              std::string_view value) {
  if (value.size() >= 2 && value.front() == '[' && value.back() == ']') value = value.substr(1, value.size() - 2);
  message->GetReflection()->ClearField(message, field);
  if (value.find_first_not_of(' ') == std::string_view::npos) return;
  for (std::string_view item : split(value, ',')) {
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    TextFormatErrors errors(assignment);
    pb::TextFormat::Parser parser;
    parser.RecordErrorsTo(&errors);
    if (!parser.ParseFieldValueFromString(std::string(item), field, message)) {
      throw JobError(fmt::format("--set '{}': '{}' is not a valid {} for {}", assignment, item, field->type_name(),
                                 field->full_name()));
    }
  }
}

void apply_override(proto::Job& job, std::string_view assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    throw JobError(fmt::format("--set '{}': expected path=value", assignment));
  }
  const std::string_view path = assignment.substr(0, eq);
  const std::string value(assignment.substr(eq + 1));
  pb::Message* message = &job;
  const auto parts = split(path, '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string_view name = parts[i];
    int64_t index = -1;
    if (const size_t bracket = name.find('['); bracket != std::string_view::npos) {
      const std::string_view digits = name.substr(bracket + 1, name.size() - bracket - 2);
      if (name.back() != ']' ||
          std::from_chars(digits.data(), digits.data() + digits.size(), index).ec != std::errc() ||
          index < 0) {
        throw JobError(fmt::format("--set '{}': bad index in '{}'", assignment, name));
      }
      name = name.substr(0, bracket);
    }
    const pb::Descriptor* d = message->GetDescriptor();
    const pb::FieldDescriptor* field = d->FindFieldByName(std::string(name));
    if (field == nullptr) {
      std::vector<std::string> names;
      for (int f = 0; f < d->field_count(); ++f) names.push_back(d->field(f)->name());
      throw JobError(fmt::format("--set '{}': {} has no field '{}' (fields: {})", assignment,
                                 d->name(), name, fmt::join(names, ", ")));
    }
    const pb::Reflection* r = message->GetReflection();
    const bool last = i + 1 == parts.size();
    // A repeated number or word as a whole list: --set sampling.fanout=15,10,5.
    const bool list = last && field->is_repeated() && index < 0 &&
                      field->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE;
    if (!list && field->is_repeated() != (index >= 0)) {
      throw JobError(fmt::format("--set '{}': '{}' {} an index", assignment, name,
                                 field->is_repeated() ? "needs" : "takes no"));
    }
    if (!last) {
      if (field->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE) {
        throw JobError(fmt::format("--set '{}': '{}' is not a message", assignment, name));
      }
      if (index >= 0) {
        const int size = r->FieldSize(*message, field);
        if (index > size) {
          throw JobError(fmt::format("--set '{}': '{}' has {} elements", assignment, name, size));
        }
        message = index == size ? r->AddMessage(message, field)
                                : r->MutableRepeatedMessage(message, field, static_cast<int>(index));
      } else {
        message = r->MutableMessage(message, field);
      }
      continue;
    }
    if (index >= 0) {
      throw JobError(fmt::format("--set '{}': set an element's fields, e.g. {}[{}].out=16",
                                 assignment, name, index));
    }
    if (list) {
      set_list(message, field, assignment, value);
      return;
    }
    // Parse the value with the text-format rules of the field's type; strings
    // may be given without quotes.
    std::string literal = value;
    if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING &&
        (literal.empty() || literal.front() != '"')) {
      literal = fmt::format("\"{}\"", pb::CEscape(literal));
    }
    // An enumeration's value in any case (--set optimizer.kind=sgd), as the
    // command line's own flags take them.
    if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_ENUM) {
      std::string_view bare = literal;
      if (bare.size() >= 2 && bare.front() == '"' && bare.back() == '"') bare = bare.substr(1, bare.size() - 2);
      if (const pb::EnumValueDescriptor* v = enum_value_named(field->enum_type(), bare)) literal = v->name();
    }
    TextFormatErrors errors(assignment);
    pb::TextFormat::Parser parser;
    parser.RecordErrorsTo(&errors);
    if (!parser.ParseFieldValueFromString(literal, field, message)) {
      throw JobError(fmt::format("--set '{}': '{}' is not a valid {} for {}", assignment, value,
                                 field->type_name(), field->full_name()));
    }
  }
}

namespace {

// The sampling section's own ranges; how its hops match the model is the
// sampled source's check (model/training/sampled_source.h).
void validate_sampling(const proto::Sampling& s) {
  if (s.fanout_size() == 0) return;
  for (int h = 0; h < s.fanout_size(); ++h) {
    if (s.fanout(h) == 0 || s.fanout(h) < -1) {
      throw JobError(fmt::format("job: sampling.fanout[{}] = {}: a fanout is >= 1, or -1 for every in-edge", h,
                                 s.fanout(h)));
    }
  }
  if (s.batch_size() < 1) {
    throw JobError(fmt::format("job: sampling.batch_size = {}: a batch holds at least one seed", s.batch_size()));
  }
  if (!(s.growth() > 1 && s.growth() <= 16)) {
    throw JobError(fmt::format("job: sampling.growth = {} must be > 1 and <= 16", s.growth()));
  }
  if (s.prefetch() < 0) throw JobError(fmt::format("job: sampling.prefetch = {} must be >= 0", s.prefetch()));
  if (s.threads() < 0) throw JobError(fmt::format("job: sampling.threads = {} must be >= 0", s.threads()));
}

void validate_link(const proto::Job& job) {
  if (!job.has_link()) return;
  const proto::Link& l = job.link();
  const auto fraction = [](double v, const char* field) {
    if (!(v >= 0 && v <= 1)) throw JobError(fmt::format("job: link.{} = {} is not in [0, 1]", field, v));
  };
  fraction(l.val_fraction(), "val_fraction");
  fraction(l.test_fraction(), "test_fraction");
  fraction(l.disjoint_train_ratio(), "disjoint_train_ratio");
  if (l.val_fraction() + l.test_fraction() > 1) {
    throw JobError(fmt::format("job: link.val_fraction + link.test_fraction = {} + {} is above 1", l.val_fraction(),
                               l.test_fraction()));
  }
  if (!(l.negative_ratio() >= 0)) throw JobError(fmt::format("job: link.negative_ratio = {} is below 0", l.negative_ratio()));
  if (!(l.eval_negative_ratio() >= 0)) {
    throw JobError(fmt::format("job: link.eval_negative_ratio = {} is below 0", l.eval_negative_ratio()));
  }
  if (l.hits_k() < 1) throw JobError(fmt::format("job: link.hits_k = {} must be >= 1", l.hits_k()));
  for (int i = 0; i < l.decoder_hidden_size(); ++i) {
    if (l.decoder_hidden(i) < 1) {
      throw JobError(fmt::format("job: link.decoder_hidden[{}] = {} must be >= 1", i, l.decoder_hidden(i)));
    }
  }
  if (job.has_batching()) throw JobError("job: link prediction trains on one graph; remove the batching section");
}

}  // namespace

void validate(const proto::Job& job) {
  // No hyper-parameter, rate, probability or size may be NaN or infinite.
  if (const std::string bad = first_non_finite(job, ""); !bad.empty()) {
    throw JobError(fmt::format("job: {} is not a finite number", bad));
  }
  // Enumerations need no check: the parser refuses names outside them.
  const auto& d = job.dataset();
  if (!(d.sparse_density() >= 0 && d.sparse_density() <= 1)) {
    throw JobError(fmt::format("job: dataset.sparse_density = {} is not in [0, 1]", d.sparse_density()));
  }
  const auto& layers = job.model().layer();
  if (job.model().module_size() > 0 && !layers.empty()) {
    throw JobError("job: model has both layers (the chain form) and modules (the module-graph form); use one");
  }
  if (job.model().module_size() == 0 && job.model().loss_term_size() > 0) {
    throw JobError("job: model.loss_term is for module graphs; the chain form has model.loss");
  }
  if (layers.empty() && job.model().module_size() == 0) throw JobError("job: model has no layers and no modules");
  for (int i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    const auto fail = [&](const std::string& what) {
      throw JobError(fmt::format("job: model.layer[{}] ({}): {}", i, proto::Layer::Type_Name(l.type()), what));
    };
    if (l.type() == proto::Layer::TYPE_UNSET) {
      std::vector<std::string> types = enum_names_lower(proto::Layer::Type_descriptor());
      types.erase(types.begin());  // type_unset
      for (std::string& t : types) std::transform(t.begin(), t.end(), t.begin(), ::toupper);
      fail(fmt::format("no type; use one of {}", fmt::join(types, ", ")));
    }
    if (l.out() < 0) fail("out must be >= 0");
    if (l.heads() < 1) fail("heads must be >= 1");
    if (l.p() < 0 || l.p() >= 1) fail(fmt::format("p = {} is not in [0, 1)", l.p()));
    if (l.attention_dropout() < 0 || l.attention_dropout() >= 1) {
      fail(fmt::format("attention_dropout = {} is not in [0, 1)", l.attention_dropout()));
    }
    if (l.hidden() < 0) fail("hidden must be >= 0");
    if (l.type() == proto::Layer::LAYER_NORM && !(l.norm_eps() > 0)) fail("norm_eps must be > 0");
  }
  if (d.features() == proto::Dataset::SPARSE && !layers.empty()) {
    if (const std::string why = sparse_features_unsupported(job.model()); !why.empty()) {
      throw JobError("job: dataset.features = SPARSE: " + why);
    }
  }
  const auto& o = job.optimizer();
  if (!(o.lr() > 0)) throw JobError(fmt::format("job: optimizer.lr = {} must be > 0", o.lr()));
  if (o.weight_decay() < 0) throw JobError("job: optimizer.weight_decay must be >= 0");
  if (!(o.beta1() >= 0 && o.beta1() < 1) || !(o.beta2() >= 0 && o.beta2() < 1)) {
    throw JobError(fmt::format("job: optimizer.beta1 = {} and beta2 = {} must be in [0, 1)",
                               o.beta1(), o.beta2()));
  }
  if (!(o.eps() > 0)) throw JobError(fmt::format("job: optimizer.eps = {} must be > 0", o.eps()));
  if (!(o.momentum() >= 0)) throw JobError("job: optimizer.momentum must be >= 0");
  const auto& s = job.schedule();
  if (s.epochs() < 0) throw JobError("job: schedule.epochs must be >= 0");
  if (s.step_size() < 1) throw JobError("job: schedule.step_size must be >= 1");
  if (!(s.gamma() > 0)) throw JobError(fmt::format("job: schedule.gamma = {} must be > 0", s.gamma()));
  if (s.warmup_epochs() < 0) throw JobError("job: schedule.warmup_epochs must be >= 0");
  if (job.checkpoint().every() < 0) throw JobError("job: checkpoint.every must be >= 0");
  if (job.checkpoint().every_steps() < 0) throw JobError("job: checkpoint.every_steps must be >= 0");
  if (job.checkpoint().keep() < 1) {
    throw JobError(fmt::format("job: checkpoint.keep must be >= 1, not {}", job.checkpoint().keep()));
  }
  if (job.device().profile() != "trn1" && job.device().profile() != "trn2") {
    throw JobError(fmt::format("job: device.profile '{}' must be trn1 or trn2", job.device().profile()));
  }
  if (job.device().hbm_bytes() < 0) throw JobError("job: device.hbm_bytes must be >= 0");
  const auto& p = job.partition();
  if (!(p.bucket_mb() > 0)) {
    throw JobError(fmt::format("job: partition.bucket_mb = {} must be > 0", p.bucket_mb()));
  }
  if (p.checksum_every() < 0) throw JobError("job: partition.checksum_every must be >= 0");
  if (p.parts() < 0) throw JobError(fmt::format("job: partition.parts = {} must be >= 0", p.parts()));
  validate_sampling(job.sampling());
  validate_link(job);
}

std::string to_text(const proto::Job& job) {
  std::string text;
  pb::TextFormat::PrintToString(job, &text);
  return text;
}

std::string sparse_features_unsupported(const proto::Model& model) {
  using L = proto::Layer;
  for (int i = 0; i < model.layer_size(); ++i) {
    const L& l = model.layer(i);
    if (l.type() == L::DROPOUT) continue;
    if (l.type() == L::GCN || l.type() == L::GAT || l.type() == L::LINEAR || l.type() == L::GIN) return "";
    if (l.type() == L::SAGE) {
      if (l.aggr() == L::MEAN) return "";
      return fmt::format("layer {} is SAGE with aggr {}, which does not commute with its linear "
                         "map (MEAN does)", i, L::Aggr_Name(l.aggr()));
    }
    return fmt::format("layer {} is {}, not a layer that starts with a linear map (GCN, GAT, "
                       "LINEAR, GIN, SAGE MEAN)", i, L::Type_Name(l.type()));
  }
  return "the model has no layer that takes the features";
}

}  // namespace gnnrt::model
