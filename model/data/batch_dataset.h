// Batch datasets: many small graphs, each with rows in one or more node sets
// and edges in one or more edge sets (PyG's HeteroData, batched), loaded from
// a folder of .npy arrays named by a manifest (model/batch_manifest.proto),
// or generated (molecule-like graphs). Formats: docs/file-formats.md.
//
// Layout: the graphs' rows are concatenated per node set, graph g owning
// rows ptr[g] .. ptr[g + 1] (PyG's Batch.ptr); an edge set's edges likewise,
// their endpoints counted over the whole node set as in a PyG Batch. Every
// loader returns a fully validated dataset; bad input throws DatasetError
// naming the file, the field and the position.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/data/dataset.h"
#include "model/data/text_values.h"

namespace gnnrt::model {

// Targets of rows (nodes or graphs): float values [rows, width], or integer
// classes [rows] (width 0 then). Empty when the dataset has none.
struct Targets {
  bool classes = false;
  int64_t width = 0;             // float targets' columns
  int64_t num_classes = 0;       // classes: max label + 1
  std::string max_label_at;      // "FILE row R" of the largest label (empty: generated)
  std::vector<float> values;     // [rows, width]
  std::vector<int64_t> labels;   // [rows]
  bool empty() const { return values.empty() && labels.empty(); }
};

struct NodeSet {
  std::string name;
  int64_t width = 0;
  std::vector<float> x;          // [rows, width]
  std::vector<int64_t> ptr;      // [G + 1]
  Targets y;
  int64_t rows() const { return ptr.empty() ? 0 : ptr.back(); }
  int64_t rows_of(int64_t g) const { return ptr[g + 1] - ptr[g]; }
};

struct EdgeSet {
  std::string name;              // the relation; unique
  int source = 0, destination = 0;  // node set indices
  std::vector<int64_t> src, dst;    // [E], rows of the whole node sets
  std::vector<int64_t> ptr;         // [G + 1]
  int64_t width = 0;
  std::vector<float> x;             // [E, width] (width 0: none)
  int64_t count() const { return static_cast<int64_t>(src.size()); }
  int64_t edges_of(int64_t g) const { return ptr[g + 1] - ptr[g]; }
};

struct BatchDataset {
  std::string name;
  int64_t num_graphs = 0;
  std::vector<NodeSet> node_sets;
  std::vector<EdgeSet> edge_sets;
  Targets graph_y;  // per graph

  int node_set(std::string_view name) const;  // index, or -1
  int edge_set(std::string_view name) const;  // index, or -1
};

// A folder with manifest.pbtxt.
BatchDataset load_batch_folder(const std::filesystem::path& dir);

// A one-graph dataset (model/data/dataset.h) as the one-set, one-graph case: node
// set "node" (its features; its labels as class targets), edge set "edge"
// (node -> node), one graph. Its train/val/test masks are not carried: a
// module-graph model's losses count every row.
BatchDataset one_graph_batch(const Dataset& g);

// Writes `d` as a folder load_batch_folder reads (the default file names).
void write_batch_folder(const BatchDataset& d, const std::filesystem::path& dir);

// Molecule-like graphs (ZINC's graphs average about 23 atoms and 50
// directed bonds): random trees of `min_nodes`..`max_nodes` atoms closed
// into rings by extra bonds, atom types one-hot. Node set "atom" (target:
// the atom's degree), edge set "bond" (both directions). The graph target
// depends on structure: rings and bonds between atoms of equal type, which a
// model that only pools atom features cannot see.
struct MoleculeSpec {
  int64_t graphs = 1000;
  int64_t min_nodes = 10, max_nodes = 36;
  int64_t atom_types = 16;
  double ring_rate = 0.12;  // extra bonds per atom
  uint64_t seed = 0;
  bool operator==(const MoleculeSpec&) const = default;
};
// "molecules" or "molecules:graphs=...,seed=..." with the field names as keys.
MoleculeSpec parse_molecule_spec(std::string_view spec);
BatchDataset make_molecules(const MoleculeSpec& spec);

// A generator's spec, "<prefix>" or "<prefix>:key=value,...", as its pairs
// (DatasetError naming `where` when it is neither).
std::vector<std::pair<std::string, std::string>> spec_pairs(std::string_view spec, std::string_view prefix,
                                                            const std::string& where);
// A spec's numbers: parse_number (model/data/text_values.h), the whole text.

// Whether a dataset spec names a batch dataset: "molecules[:...]",
// "scenes[:...]" (model/data/scenes.h), or a folder holding manifest.pbtxt.
bool is_batch_dataset(std::string_view spec);
// Any dataset spec: a batch dataset, or a one-graph one (one_graph_batch).
BatchDataset load_batch_dataset(std::string_view spec);

// An xxHash64 of everything the dataset holds: its identity, compared
// across ranks.
uint64_t batch_fingerprint(const BatchDataset& d);

// Checks every invariant above (sizes, offsets, endpoints in their graph,
// finite values); throws DatasetError naming `where`, the field and the
// position.
void validate(const BatchDataset& d, const std::string& where);

}  // namespace gnnrt::model
