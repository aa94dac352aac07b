// The module registry: one entry per module kind of model/job.proto's
// Module oneof, each one unit that checks its configuration and inputs,
// declares its parameters (PyTorch state_dict names under the module's
// name) and builds its ops through the Builder. The module graph
// (model/modules/module_graph.h) resolves inputs and order; a kind sees only its
// own inputs, as ports.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/job.pb.h"
#include "model/modules/network.h"
#include "runtime/builder.h"

namespace gnnrt::model {

// What a batch dataset offers a model: node sets, edge sets and their
// widths, and the targets.
struct Schema {
  struct NodeSetInfo {
    std::string name;
    int64_t width = 0;
    bool target = false, classes = false;
    int64_t target_width = 0, num_classes = 0;
    std::string max_label_at;  // "FILE row R" of the largest label, for messages
  };
  struct EdgeSetInfo {
    std::string name;
    int source = 0, destination = 0;
    int64_t width = 0;  // 0: no edge features
    // A sampled block (docs/sampling.md): the destinations are the first
    // rows of the source set, the same nodes. Kinds given one input take
    // the destinations' rows from it (ModuleContext::narrow); GCN and GAT
    // add one self loop per destination.
    bool block = false;
    // Float targets per edge ("<edge set>.y", [edges, target_width]) and
    // a mask of the real ones ("<edge set>.mask"): link prediction's pairs.
    bool target = false;
    int64_t target_width = 0;
  };
  std::vector<NodeSetInfo> node_sets;
  std::vector<EdgeSetInfo> edge_sets;
  bool graph_target = false, graph_classes = false;
  int64_t graph_target_width = 0, graph_num_classes = 0;
  std::string graph_max_label_at;

  int node_set(const std::string& name) const;  // index or -1
  int edge_set(const std::string& name) const;
};

// The padded rows of one shape bucket, sink rows included: node set s has
// node_rows[s] rows (the last one the sink every padded edge points at),
// edge set e edge_rows[e] edges, graph_rows graphs (the last the sink graph
// of padded nodes).
//
// Unpadded (the layer chain's one graph, whole or a rank's shard): every
// row is real, so no row is zeroed and no global-id input is read (the
// Builder keys dropout by local rows, or by a shard's global ids), and
// self_loop_edges gives each edge set's self-loop graph its exact size.
struct BucketShape {
  std::vector<int64_t> node_rows, edge_rows;
  int64_t graph_rows = 0;
  bool padded = true;
  std::vector<int64_t> self_loop_edges;  // unpadded: per edge set
  bool operator==(const BucketShape&) const = default;
};

// Tensor and graph names bound on the core for one batch.
std::string features_name(const std::string& set);     // "<set>.x"
std::string mask_name(const std::string& set);         // "<set>.mask": real rows (bool)
std::string target_name(const std::string& set);       // "<set>.y"
std::string pool_graph_name(const std::string& set);   // "<set>.pool": rows -> graphs
std::string broadcast_graph_name(const std::string& set);  // "<set>.broadcast": graphs -> rows
std::string reversed_graph_name(const std::string& edges);  // "<edges>.reversed"
std::string self_loop_graph_name(const std::string& edges);  // "<edges>.self_loops"
// A block's destination rows as a graph from the source rows: edge i runs
// from source row i to destination row i (gathering through it narrows).
std::string prefix_graph_name(const std::string& edges);  // "<edges>.prefix"
// A block's GCN edge weights over its self-loop graph, bound with the
// batch (f32 [edges]): "<graph>.gcn_norm".
std::string gcn_norm_name(const std::string& graph);
std::string real_rows_name(const std::string& set);  // "<set>.real": i64 1 on real rows, 0 on padding
// "<set>.global_id" (node sets and "graph"): i64, each row's index in the
// dataset, padding numbered after them; an edge set's and a self-loop
// graph's are runtime::edge_id_name(graph): dropout's keys, the same rows
// drawing the same mask whatever the batch, share or rank count.
std::string global_id_name(const std::string& set);
inline constexpr const char* kGraphSet = "graph";  // "graph.mask", "graph.y"

// A tensor a module reads or writes: its rows are a node set's, an edge
// set's or the graphs'.
struct Port {
  enum class Domain { kNodes, kEdges, kGraphs };
  Domain domain = Domain::kNodes;
  int set = 0;  // node set or edge set index
  int64_t width = 0;
  runtime::ValueId value = runtime::kNoValue;
  std::string name;  // what the model calls it
  // Sparse features (the layer chain's first layer, dataset.features
  // SPARSE): the pattern as a graph from `width` columns to the rows, and
  // its stored values; `value` is then none. Kinds that take it project it
  // (ModuleContext::project) or drop it out; model/job.h's
  // sparse_features_unsupported refuses the rest.
  int32_t sparse_pattern = -1;
  runtime::ValueId sparse_values = runtime::kNoValue;
  bool sparse() const { return sparse_pattern >= 0; }
};

// The same rows (domain and set) and width: operands of an elementwise op.
inline bool same_rows_and_width(const Port& a, const Port& b) {
  return a.domain == b.domain && a.set == b.set && a.width == b.width;
}

// The scope of a module's parameters: `params`, else its name.
inline const std::string& param_scope(const proto::Module& m) { return m.params().empty() ? m.name() : m.params(); }

// What the modules of one program built so far declared: parameters with
// their ids and the scope (param_scope) that made each, aliases, buffers,
// and the values built once per program (GCN's normalisation by graph).
struct DeclaredParams {
  std::vector<ParamDecl> params;
  std::vector<runtime::ValueId> ids;
  std::vector<std::string> scopes;
  std::vector<ParamAlias> aliases;
  std::vector<Buffer> buffers;
  std::map<int32_t, runtime::ValueId> gcn_norms;  // by graph: built once per program
};

// A convolution's aggregation taken out of its program, for the evaluation
// over node shards (ShardedLayerWise, docs/sampling.md): the messages part
// stops where the aggregation starts and outputs what it would aggregate
// (kMessagesName); the transform part starts from the aggregate, an input
// (kAggregateName) that the caller makes, the halo's rows a column block
// at a time. One aggregation a program: unweighted, with GCN's weights, or
// with GAT's attention, whose messages part also outputs the per-head
// scores of the sources and destinations (kSourceScoresName,
// kDestinationScoresName) for the caller to weigh the edges with
// (attention_weights). Other weights are refused.
struct AggregationSplit {
  enum class Part { kMessages, kTransform };
  Part part = Part::kMessages;
  // What the convolution aggregates, filled in as it builds.
  bool found = false;
  ops::Reduce reduce = ops::Reduce::kSum;
  bool self_loops = false;  // over the edges and a loop per destination
  bool gcn_norm = false;    // weighted by GCN's normalisation
  bool from_input = false;  // the messages are the program's input itself
  int64_t width = 0;        // of the messages
  int64_t heads = 0;        // GAT's attention heads (0: no attention)
  double negative_slope = 0;
};
inline constexpr const char* kMessagesName = "messages";
inline constexpr const char* kSourceScoresName = "scores.src";
inline constexpr const char* kDestinationScoresName = "scores.dst";
inline constexpr const char* kAggregateName = "aggregate";

// GAT's attention weights over `graph`: per edge and head,
// softmax over the destination's in-edges of
// leaky_relu(a_src[src] + a_dst[dst]) (a_src [N_src, H], a_dst [N_dst, H]):
// [E, H].
runtime::ValueId attention_weights(runtime::Builder& b, int32_t graph, runtime::ValueId a_src,
                                   runtime::ValueId a_dst, double negative_slope);

class ModuleContext {
 public:
  ModuleContext(runtime::Builder& b, const Schema& schema, const BucketShape& shape, bool training,
                const proto::Module& module, uint64_t key, std::vector<Port> inputs, DeclaredParams& declared,
                AggregationSplit* split = nullptr);

  runtime::Builder& b;
  const Schema& schema;
  const BucketShape& shape;
  const bool training;
  const proto::Module& module;
  const uint64_t key;  // keys this module's dropout masks
  const std::vector<Port> inputs;

  // param_scope(module).
  const std::string& scope() const { return param_scope(module); }
  // A parameter "<scope>.<suffix>"; the one already made when another
  // module of the same scope was built first (same shape, or fail()). A
  // name another scope made is refused (a module "x.to_q" beside an
  // attention "x" would otherwise share weights unasked).
  runtime::ValueId param(const std::string& suffix, std::vector<int64_t> shape, ParamDecl::Init init,
                         int64_t fan_in, int64_t fan_out, double constant = 0);
  // A buffer "<scope>.<suffix>" holding `values` (shape [size]).
  void buffer(const std::string& suffix, std::vector<float> values);
  // "<scope>.<key_suffix>" names the parameter "<scope>.<param_suffix>" too.
  void alias(const std::string& key_suffix, const std::string& param_suffix);
  // torch.nn.Linear "<module>.<prefix>.weight" / ".bias" applied to x.
  runtime::ValueId linear(const std::string& prefix, runtime::ValueId x, int64_t in, int64_t out, bool bias);
  // A convolution's aggregation of x over `graph` (Builder::aggregate),
  // or, under an AggregationSplit, its messages output or its aggregate an
  // input.
  runtime::ValueId aggregate(ops::Reduce reduce, int32_t graph, runtime::ValueId x,
                             runtime::ValueId edge_weight = runtime::kNoValue);
  // GAT's aggregation: sum over `graph`'s edges of h_src[src] weighted by
  // attention_weights(a_src, a_dst) per head (h_src [N_src, H*C]), the
  // weights dropped out at `dropout` while training; under an
  // AggregationSplit, as aggregate() with the scores output too.
  runtime::ValueId attend(int32_t graph, runtime::ValueId h_src, runtime::ValueId a_src, runtime::ValueId a_dst,
                          int64_t heads, double negative_slope, double dropout);
  // x · weightᵀ, x dense or sparse.
  runtime::ValueId project(const Port& x, runtime::ValueId weight);
  // GCN's D^-1/2 (A + I) D^-1/2 edge weights of a self-loop graph, built
  // once per program (the same graph gives the same weights).
  // A block's self-loop graph (its sources outnumber its destinations)
  // reads the weights bound as gcn_norm_name instead.
  runtime::ValueId gcn_norm(int32_t graph);
  // The first rows of v (rows of block `edge_set`'s sources): its
  // destinations' rows.
  runtime::ValueId narrow(int edge_set, runtime::ValueId v);
  int32_t graph(int edge_set);             // the edge set's adjacency
  int32_t reversed_graph(int edge_set);    // its edges reversed, same ids
  // A homogeneous edge set without its self loops, plus one loop per row
  // (GCNConv's and GATConv's graph): "<edges>.self_loops". A block's: its
  // edges and one loop per destination row.
  int32_t self_loop_graph(int edge_set);
  int32_t pool_graph(int node_set);
  int32_t broadcast_graph(int node_set);
  int edge_set(const std::string& name);   // index, or fail()
  int node_set(const std::string& name);
  Port nodes(int set, int64_t width, runtime::ValueId v) const;
  // v [rows of node set `set`, F] with its padded rows zeroed (real rows
  // keep their bits: x / 1): a convolution's output, so the sink row, which
  // every padded edge feeds, cannot grow layer after layer to Inf. v itself
  // when unpadded.
  runtime::ValueId zero_padding(int set, runtime::ValueId v);
  // The global ids of p's rows (global_id_name), and of a graph's edges;
  // none when unpadded (the Builder's own keys, BucketShape).
  runtime::ValueId row_ids(const Port& p);
  runtime::ValueId edge_ids(int32_t graph);
  std::string describe(const Port& p) const;  // "'atom.x' (rows of node set 'atom', width 16)"
  // Exactly `count` inputs (or between min and max).
  void expect_inputs(size_t min, size_t max) const;
  void expect_domain(const Port& p, Port::Domain domain, int set, const char* what) const;
  [[noreturn]] void fail(const std::string& what) const;

 private:
  // Under an AggregationSplit, the aggregation of x over graph g taken out
  // (the split's reduce and weights already set): its messages output or
  // its aggregate an input.
  runtime::ValueId split_at(int32_t g, runtime::ValueId x);

  DeclaredParams& declared_;
  AggregationSplit* split_;
};

struct ModuleKind {
  const char* name;  // the oneof field's name
  Port (*build)(ModuleContext& c);
};

// The kind of a module; throws std::invalid_argument when none is set.
const ModuleKind& module_kind(const proto::Module& module);

}  // namespace gnnrt::model
