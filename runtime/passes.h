// Compiler passes over a Program. Each rewrites the program in place and
// returns how many rewrites it made; none changes what the program
// computes beyond float rounding (fusion gives the same bits; reordering a
// linear aggregation with a matmul changes the summation order). Invalid
// programs throw CompileError naming the op.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "runtime/program.h"

namespace gnnrt::runtime {

class CompileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A program whose planned peak exceeds the device's memory (check_capacity):
// callers with a smaller program to offer catch it.
class CapacityError : public CompileError {
 public:
  using CompileError::CompileError;
};

// SSA and reference checks: every op input is defined before use (by an op,
// or bound: input, parameter, state), every temp is defined exactly once,
// graph indices exist, outputs are defined; and every op's results are
// what its shape rule (op_defs.h) gives for its operands and attributes.
// Run on every program compiled and every program loaded from the cache.
void verify(const Program& p);

// gather -> [edge_scale ->] scatter over the same graph, with intermediates
// used nowhere else, becomes one spmm (the E x F messages are never built).
int fuse_aggregations(Program& p);

// segment_softmax(leaky_relu(sddmm_add(a, b))) over one graph, with the
// intermediates used nowhere else, becomes one attention_softmax(a, b)
// (GAT's attention: the [E, H] logits and activations are never written;
// the backward recomputes the logits' signs from a and b). The same bits.
int fuse_attention(Program& p);

// nll_loss(log_softmax(x)), the log softmax read nowhere else (a train
// step's loss), becomes one cross_entropy(x) that computes the log softmax
// of the loss's masked rows only, and whose gradient is 0 in the other
// rows. The same bits for finite x.
int fuse_cross_entropy(Program& p);

// Gradient sums (after the backward is appended): add(P, head_dot_grad_x(
// att, g)), the head_dot_grad_x used nowhere else, becomes one
// head_dot_grad_x(att, g, P) that writes P + g att in the add's place (GAT's
// x gets its gradient from the aggregation and from both attention dots:
// two [N, H*C] adds less a layer; the same bits).
int fuse_gradient_sums(Program& p);

// Two sparse products of one sparse matrix (after the backward is
// appended): sparse_matmul(values, b) and sparse_matmul(values, b2) with the
// same graph, values, transpose and shapes become one op with inputs
// (values, b, b2) and outputs (out, workspace, out2, workspace2), run by one
// walk of the matrix (ops/sparse_matmul.h); sparse_matmul_grad_b pairs the
// same way over (values, g, g2). SAGE's two linear maps of a sparse input
// and their weight gradients. The pair sits where the first op was when the
// second's inputs are defined by then, else where the second was when
// nothing from the first's successor to the second itself reads the first's
// results; never across an op that writes state; otherwise the two stay
// apart. The same bits.
int pair_sparse_products(Program& p);

// A linear aggregation (spmm sum or mean with at most one weight per edge,
// with the halo sum and the division by global degrees that follow it in a
// partitioned program) next to a matmul by a weight runs on the narrower
// side:
//   matmul(aggregate(X), W) -> aggregate(matmul(X, W))   when W narrows
//   aggregate(matmul(X, W)) -> matmul(aggregate(X), W)   when W widens
// (aggregate(X)·W = aggregate(X·W) for per-edge scalar weights, and a halo
// of the narrower side moves fewer bytes).
int reorder_aggregate_matmul(Program& p);

// A weight matmul of gathered rows (a row selection, such as an edge set's
// endpoints) runs on the rows before the gather when they are fewer, and a
// matmul of a concatenation (x Wᵀ, W [out, in]) splits by W's columns so
// that each gathered part can move before its gather:
//   matmul(gather(X), W)        -> gather(matmul(X, W))
//   matmul(concat(a, b), Wᵀ)    -> matmul(a, W[:, :wa]ᵀ) + matmul(b, W[:, wa:]ᵀ)
// VectorWorld's EdgeFeatureUpdate applies Linears to [x_dst, x_src] on every
// lane-to-lane edge: E x 2F x out products become N x 2F x out, and two
// gathers of `out` columns (a row selection commutes with a matmul; the
// split sums in another order). Gathers and concatenations left unread go
// with dead-value elimination.
int project_before_gather(Program& p);

// Gradient all-reduce in buckets (a partitioned train step): groups the
// gradients in the order they become final into buckets of about
// `bucket_bytes`, starts each bucket's all-reduce right after the op that
// finishes its last gradient (so it overlaps the rest of the backward pass),
// and waits for all of them at the end. Returns the all-reduced gradients
// (kNoValue stays kNoValue); the number of buckets in *buckets.
std::vector<ValueId> bucket_gradients(Program& p, std::span<const ValueId> grads,
                                      int64_t bucket_bytes, int* buckets);

// Removes ops none of whose outputs is used or a program output, unless the
// op writes persistent state. Repeats until nothing changes.
int eliminate_dead_values(Program& p);

}  // namespace gnnrt::runtime
