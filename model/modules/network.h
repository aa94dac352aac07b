// The layer chain a job describes (model.layer), written as runtime
// Programs: each layer is translated into the module kind that defines it
// (modules.h; GCNConv, SAGEConv, GATConv, GINConv, Linear, LayerNorm,
// Dropout, ReLU, ELU with PyG's default semantics) over one unpadded node
// set and its graph, then the chain's loss and metrics. Layers ask the
// Builder for aggregations and never call kernels, so the compiler chooses
// fusion and operation order, and the multi-core runtime can put its halo
// exchange after each aggregation.
//
// Two programs per job, over the same parameters (PyG names:
// conv1.lin.weight, ...) and the same resident tensors:
//   train_step  forward in training mode (dropout on) -> loss; the compiler
//               appends backward and the optimizer; adds the loss to
//               metrics[0]
//   infer       forward in eval mode -> "logits"; counts correct
//               predictions of the train/val/test masks into metrics[2..7]
// Inputs: "x" [N, F] f32 (or, with sparse features, the graph "x" holding
// the features' pattern, entry e at row dst(e) and column src(e), and its
// stored values "x.values" [nnz] f32), "y" [N] i64, "train_mask"/"val_mask"/"test_mask"
// [N] bool ("y_onehot" [N, C] f32 for the mse loss). Graphs: "graph" (the
// dataset's edges) and "graph.self_loops" (self loops removed, one added
// per node, as GCNConv and GATConv do; numbered in destination order,
// model::self_loop_ids). State: "metrics" [8] f64.
// Partitioned programs also read the inputs runtime/builder.h lists (global
// ids, degrees, master flags, mask counts), bound by bind_shard().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/job.h"
#include "model/job.pb.h"
#include "ops/reduce.h"
#include "runtime/builder.h"
#include "runtime/program.h"

namespace gnnrt::model {

inline constexpr const char* kGraph = "graph";
inline constexpr const char* kGraphSelfLoops = "graph.self_loops";  // modules.h's self_loop_graph_name(kGraph)
inline constexpr const char* kFeatures = "x";               // dense input, or the sparse pattern
inline constexpr const char* kFeatureValues = "x.values";  // sparse: the stored values
inline constexpr const char* kMetrics = "metrics";
inline constexpr const char* kLogits = "logits";

// metrics[] slots: loss sum over steps, then (correct, total) per mask.
enum MetricSlot : uint64_t { kLossSum = 0, kTrainCorrect = 2, kValCorrect = 4, kTestCorrect = 6 };
inline constexpr int64_t kMetricSlots = 8;

struct ParamDecl {
  // kGlorot: U(+-sqrt(6 / (fan_in + fan_out))) (PyG's glorot);
  // kTorchLinear: U(+-1 / sqrt(fan_in)) (torch.nn.Linear's weight and bias);
  // kConstant: every value `constant` (GINConv's trainable eps).
  enum class Init { kGlorot, kZeros, kOnes, kTorchLinear, kConstant };
  std::string name;
  std::vector<int64_t> shape;
  Init init = Init::kZeros;
  int64_t fan_in = 0, fan_out = 0;
  double constant = 0;
};

// A state_dict entry that is not a parameter (torch's register_buffer):
// its values are fixed when the program is built; it is written with the
// parameters and a loaded file must hold the same values (GINConv's eps
// without train_eps).
struct Buffer {
  std::string key;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// The kernels' reduction a job's enumeration names (SUM, MEAN, MAX).
ops::Reduce reduce_named(std::string_view name);

// GINConv's self term (1 + eps) x for x [rows, F]: with train_eps,
// `eps_param` (a parameter [1]) through ops that differentiate to it; else
// the constant `eps` (x itself at 0), eps_param kNoValue.
runtime::ValueId gin_self_term(runtime::Builder& b, runtime::ValueId x, int64_t rows, double eps,
                               runtime::ValueId eps_param);

struct NetworkShape {
  int64_t nodes = 0, features = 0, classes = 0;
  int64_t edges = 0, edges_self_loops = 0;
  // One rank's share of a vertex-cut graph: the programs are partitioned
  // (runtime/builder.h) and `nodes` counts the rank's local vertices.
  bool partitioned = false;
  // >= 0: the features are sparse with this many stored values; the first
  // layer multiplies them as a sparse matrix (model/job.h: sparse_features_unsupported).
  int64_t feature_nnz = -1;
};

// A second state_dict key for a parameter (torch lists a module stored under
// two attribute names twice: GATConv's lin_dst is its lin_src, and
// VectorWorld's non-bipartite attention layers alias attn_prenorm_x_dst to
// attn_prenorm_x_src): loaded with it, written with its values.
struct ParamAlias {
  std::string key, param;
};

struct Network {
  runtime::Program program;
  std::vector<ParamDecl> params;
  std::vector<runtime::ValueId> param_ids;  // in params order
  std::vector<ParamAlias> aliases;
  std::vector<Buffer> buffers;
  runtime::ValueId loss = runtime::kNoValue;
};

// How many layers of each named kind came before: conv1, conv2, lin1, norm1, ...
struct LayerNames {
  int convs = 0, linears = 0, norms = 0;
};

// Layer i of the chain as the module kind that defines it, named as its
// parameters are (convK, linK, normK; reluI, eluI, dropoutI by position),
// convolutions over the chain's one edge set kGraph (inputs not set).
proto::Module as_module(const proto::Layer& l, int64_t out, int i, LayerNames& names);

Network build_train_step(const proto::Model& model, const NetworkShape& shape);
Network build_inference(const proto::Model& model, const NetworkShape& shape);

}  // namespace gnnrt::model
