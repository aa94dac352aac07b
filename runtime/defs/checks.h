// Checks several shape rules share, and cost helpers (runtime/defs/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ops/reduce.h"
#include "runtime/op_defs.h"

namespace gnnrt::runtime::defs {

using Shape = std::vector<int64_t>;

int64_t heads_of(const OpCheck& c);

void probability(const OpCheck& c);

// Operand i: a float matrix.
void matrix(const OpCheck& c, std::size_t i, const char* what);

// Operand i: a float matrix with `n` rows (`whose`: what the rows are).
void rows_of(const OpCheck& c, std::size_t i, const char* what, int64_t n, const std::string& whose);

// Operand i: a vector [n] of dtype d.
void vector_of(const OpCheck& c, std::size_t i, DType d, int64_t n, const char* what);

// The global count of a loss's real rows (i64 [1], a partitioned or
// data-parallel program's) at i, when present.
void optional_count(const OpCheck& c, std::size_t i);

// An edge weight [E] or [E, H] at i whose heads split `features` and equal
// the op's `heads` attribute.
void edge_weight(const OpCheck& c, std::size_t i, int64_t edges, int64_t features);

void no_weight_heads(const OpCheck& c);

ops::Reduce reduction(const OpCheck& c);

// The results of a max/min reduction: its value and the winning edge per element.
void value_and_arg(OpCheck& c, ops::Reduce reduce, const Shape& s);

// Per-edge scores [E, H] at i, with heads = H.
int64_t edge_scores(const OpCheck& c, std::size_t i, const char* what);

// Per-destination rows [N_dst, h] at i.
void dst_rows(const OpCheck& c, std::size_t i, const char* what, int64_t h);

// a [N_src, H] at i, b [N_dst, H] at i + 1: sddmm_add and attention_softmax.
int64_t per_endpoint(const OpCheck& c, std::size_t i);

// The stored values [nnz] of the op's sparse matrix (a graph) at i.
const GraphInfo& stored_values(const OpCheck& c, std::size_t i);

// A matrix with a row per local vertex of a partitioned program.
void halo_rows(const OpCheck& c);

// The class ops: x [rows, classes] at i, labels and mask [rows] after it.
void class_loss(const OpCheck& c, const char* x_name, std::size_t i = 0);

// A loss gradient's seed: g [1] at i.
void loss_seed(const OpCheck& c, std::size_t i);

// x [N, C] and gamma [C] at 0 and 1; the moments [3] f64 at i when present.
void norm_operands(const OpCheck& c, std::size_t moments);

// Edge rows shared by heads: the graph's [N_dst, H*K] node rows at
// `node`, [E, H] weights at `weight` (when not npos) and [E, K] edge rows at
// `edge`; returns K. heads = H.
int64_t head_edge_operands(const OpCheck& c, std::size_t node, std::size_t weight, std::size_t edge);

constexpr std::size_t kAbsent = std::string::npos;

double cols_of_first(const Program& p, const Op& op);

double edges_of(const Program& p, const Op& op);

// scale, relu, leaky_relu, elu, activation: elementwise over one operand.
void unary(OpCheck& c);

}  // namespace gnnrt::runtime::defs
