// Algorithms `recursive_doubling` and `rabenseifner`: log2(p) rounds in which
// rank v talks to rank v xor 2^k (Thakur, Rabenseifner & Gropp 2005).
//   recursive_doubling allreduce: every round exchanges the whole vector;
//     fewest rounds, best for small messages.
//   recursive_doubling allgather: every round doubles the blocks held.
//   rabenseifner allreduce: recursive halving reduce-scatter (every round
//     halves the range a rank reduces) then recursive doubling allgather;
//     log2(p) rounds each way and 2 n (p-1)/p bytes, best for large messages.
//   rabenseifner reduce_scatter: its first half alone.
//
// Non-powers of two fold (MPICH's scheme): with p2 the largest power of two
// <= p and rem = p - p2, each even rank below 2 rem hands its data to the odd
// rank above it and sits out; the p2 active ranks get virtual ranks, and
// virtual rank v stands for the real ranks first_real(v)..last_real(v), whose
// blocks are contiguous. At the end the odd rank hands the result back.
#include <bit>

#include "collectives/algorithm.h"

namespace gnnrt::collectives::detail {
namespace {

struct Fold {
  int p, p2, rem;
  explicit Fold(int size)
      : p(size), p2(static_cast<int>(std::bit_floor(static_cast<unsigned>(size)))), rem(size - p2) {}
  bool folded_away(int real) const { return real < 2 * rem && real % 2 == 0; }
  bool absorbs(int real) const { return real < 2 * rem && real % 2 == 1; }
  int virtual_of(int real) const { return real < 2 * rem ? real / 2 : real - rem; }
  int real_of(int v) const { return v < rem ? 2 * v + 1 : v + rem; }
  int first_real(int v) const { return v < rem ? 2 * v : v + rem; }
};

// Bytes [begin, end) of the blocks of virtual ranks [a, b).
struct Range {
  std::size_t begin, end;
  std::size_t bytes() const { return end - begin; }
};
Range virtual_range(const Fold& fold, const Blocks& blocks, std::size_t element, int a, int b) {
  const int first = fold.first_real(a), last = fold.real_of(b - 1);
  return {blocks.offset[first] * element, (blocks.offset[last] + blocks.length[last]) * element};
}

// Recursive halving among the active ranks: afterwards virtual rank v holds
// in work the reduction of its own blocks.
Task halving(Transfers& t, const Fold& fold, std::byte* work, const Blocks& blocks,
             ElementType type, ReduceOp op, std::byte* tmp) {
  const std::size_t element = type.size();
  const int v = fold.virtual_of(t.rank());
  int lo = 0, hi = fold.p2;
  for (int m = fold.p2 / 2; m >= 1; m /= 2) {
    const int mid = lo + m;
    const bool lower = v < mid;
    const Range keep = virtual_range(fold, blocks, element, lower ? lo : mid, lower ? mid : hi);
    const Range give = virtual_range(fold, blocks, element, lower ? mid : lo, lower ? hi : mid);
    const int partner = fold.real_of(v ^ m);
    const int send = t.isend(partner, work + give.begin, give.bytes());
    const int receive = t.irecv(partner, tmp, keep.bytes());
    co_await t.wait(send, receive);
    reduce_into(op, type, work + keep.begin, tmp, keep.bytes() / element);
    if (lower) hi = mid; else lo = mid;
  }
}

// Recursive doubling among the active ranks: virtual rank v starts with its
// own blocks in work and ends with all of them.
Task doubling(Transfers& t, const Fold& fold, std::byte* work, const Blocks& blocks,
              std::size_t element) {
  const int v = fold.virtual_of(t.rank());
  for (int m = 1; m < fold.p2; m *= 2) {
    const int base = v & ~(m - 1), partner_base = (v ^ m) & ~(m - 1);
    const Range mine = virtual_range(fold, blocks, element, base, base + m);
    const Range theirs = virtual_range(fold, blocks, element, partner_base, partner_base + m);
    const int partner = fold.real_of(v ^ m);
    const int send = t.isend(partner, work + mine.begin, mine.bytes());
    const int receive = t.irecv(partner, work + theirs.begin, theirs.bytes());
    co_await t.wait(send, receive);
  }
}

// Even ranks below 2 rem hand their whole vector to the odd rank above,
// which reduces it into its own; the even rank then sits out.
Task fold_in(Transfers& t, const Fold& fold, std::byte* work, std::size_t bytes, ElementType type,
             ReduceOp op, std::byte* tmp) {
  const int r = t.rank();
  if (fold.folded_away(r)) {
    co_await t.wait(t.isend(r + 1, work, bytes));
  } else if (fold.absorbs(r)) {
    co_await t.wait(t.irecv(r - 1, tmp, bytes));
    reduce_into(op, type, work, tmp, bytes / type.size());
  }
}

}  // namespace

Task recursive_doubling_allreduce(Transfers& t, const Call& call, Scratch& scratch) {
  const Fold fold(t.size());
  const int r = t.rank();
  const std::size_t element = call.type.size(), bytes = call.count * element;
  copy_bytes(call.recv, call.send, bytes);
  std::byte* tmp = scratch.get(bytes);
  co_await fold_in(t, fold, call.recv, bytes, call.type, call.reduce, tmp);
  if (fold.folded_away(r)) {
    co_await t.wait(t.irecv(r + 1, call.recv, bytes));
    co_return;
  }
  const int v = fold.virtual_of(r);
  for (int m = 1; m < fold.p2; m *= 2) {
    const int partner = fold.real_of(v ^ m);
    const int send = t.isend(partner, call.recv, bytes);
    const int receive = t.irecv(partner, tmp, bytes);
    co_await t.wait(send, receive);
    reduce_into(call.reduce, call.type, call.recv, tmp, call.count);
  }
  if (fold.absorbs(r)) co_await t.wait(t.isend(r - 1, call.recv, bytes));
}

Task rabenseifner_allreduce(Transfers& t, const Call& call, Scratch& scratch) {
  const Fold fold(t.size());
  const int r = t.rank();
  const std::size_t element = call.type.size(), bytes = call.count * element;
  copy_bytes(call.recv, call.send, bytes);
  std::byte* tmp = scratch.get(bytes);
  co_await fold_in(t, fold, call.recv, bytes, call.type, call.reduce, tmp);
  if (fold.folded_away(r)) {
    co_await t.wait(t.irecv(r + 1, call.recv, bytes));
    co_return;
  }
  const Blocks blocks = balanced_blocks(call.count, t.size());
  co_await halving(t, fold, call.recv, blocks, call.type, call.reduce, tmp);
  co_await doubling(t, fold, call.recv, blocks, element);
  if (fold.absorbs(r)) co_await t.wait(t.isend(r - 1, call.recv, bytes));
}

Task recursive_halving_reduce_scatter(Transfers& t, const Call& call, Scratch& scratch) {
  const Fold fold(t.size());
  const int r = t.rank();
  const std::size_t element = call.type.size(), bytes = call.bytes();
  const Blocks blocks = contiguous_blocks(call.counts);
  std::byte* work = scratch.get(bytes);
  std::byte* tmp = scratch.get(bytes);
  copy_bytes(work, call.send, bytes);
  co_await fold_in(t, fold, work, bytes, call.type, call.reduce, tmp);
  if (fold.folded_away(r)) {
    co_await t.wait(t.irecv(r + 1, call.recv, blocks.length[r] * element));
    co_return;
  }
  co_await halving(t, fold, work, blocks, call.type, call.reduce, tmp);
  if (fold.absorbs(r)) {
    co_await t.wait(t.isend(r - 1, work + blocks.offset[r - 1] * element,
                             blocks.length[r - 1] * element));
  }
  copy_bytes(call.recv, work + blocks.offset[r] * element, blocks.length[r] * element);
}

Task recursive_doubling_allgather(Transfers& t, const Call& call, Scratch&) {
  const Fold fold(t.size());
  const int r = t.rank();
  const std::size_t element = call.type.size();
  const Blocks blocks{call.displs, call.counts};
  const std::size_t total = (blocks.offset.back() + blocks.length.back()) * element;
  copy_bytes(call.recv + blocks.offset[r] * element, call.send, blocks.length[r] * element);
  if (fold.folded_away(r)) {
    co_await t.wait(t.isend(r + 1, call.recv + blocks.offset[r] * element,
                             blocks.length[r] * element));
    co_await t.wait(t.irecv(r + 1, call.recv, total));
    co_return;
  }
  if (fold.absorbs(r)) {
    co_await t.wait(t.irecv(r - 1, call.recv + blocks.offset[r - 1] * element,
                             blocks.length[r - 1] * element));
  }
  co_await doubling(t, fold, call.recv, blocks, element);
  if (fold.absorbs(r)) co_await t.wait(t.isend(r - 1, call.recv, total));
}

}  // namespace gnnrt::collectives::detail
