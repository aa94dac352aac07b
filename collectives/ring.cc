// Algorithm `ring`: p - 1 reduce-scatter steps then p - 1 allgather steps,
// each rank sending only to its right neighbour and receiving from its left
// (Patarasuk & Yuan 2009; Gloo's allreduce_ring_chunked). Bandwidth optimal:
// every rank sends 2 n (p-1)/p bytes for an allreduce of n bytes.
//
// The reduce-scatter is chunked and pipelined: each block travels as pieces
// of at most `chunk_bytes`, and the receive of piece t+1 is in flight while
// piece t is being reduced, so the reduction hides behind the transfer.
// Each block is reduced along one chain and then copied, so every rank ends
// with the same bits.
#include <algorithm>

#include "collectives/algorithm.h"

namespace gnnrt::collectives::detail {
namespace {

int mod(int a, int p) { return ((a % p) + p) % p; }

// Piece j of `chunks` pieces of [0, length): [lo, hi).
std::pair<std::size_t, std::size_t> piece(std::size_t length, std::size_t j, std::size_t chunks) {
  return {length * j / chunks, length * (j + 1) / chunks};
}

// After it, rank r holds in work the reduction of block r over all ranks.
Task reduce_scatter_phase(Transfers& t, std::byte* work, const Blocks& blocks, ElementType type,
                          ReduceOp op, std::size_t chunk_bytes, Scratch& scratch) {
  const int p = t.size(), r = t.rank();
  if (p == 1) co_return;
  const std::size_t element = type.size();
  const std::size_t max_block = blocks.max_length();
  const std::size_t chunks =
      std::max<std::size_t>(1, (max_block * element + chunk_bytes - 1) / chunk_bytes);
  const std::size_t slot_bytes = ((max_block + chunks - 1) / chunks) * element;
  std::byte* slot[2] = {scratch.get(slot_bytes), scratch.get(slot_bytes)};
  const int right = mod(r + 1, p), left = mod(r - 1, p);
  const std::size_t steps = static_cast<std::size_t>(p - 1) * chunks;

  // Step s = k * chunks + j moves piece j of a block: rank r sends block
  // r - k - 1 and receives (and reduces into) block r - k - 2.
  auto span_of = [&](std::size_t s, int shift) {
    const int block = mod(r - static_cast<int>(s / chunks) - shift, p);
    const auto [lo, hi] = piece(blocks.length[block], s % chunks, chunks);
    return std::pair{(blocks.offset[block] + lo) * element, (hi - lo) * element};
  };

  int receive[2] = {-1, -1};
  {
    const auto [offset, bytes] = span_of(0, 2);
    (void)offset;
    receive[0] = t.irecv(left, slot[0], bytes);
  }
  int previous_send = -1;
  for (std::size_t s = 0; s < steps; ++s) {
    const auto [send_offset, send_bytes] = span_of(s, 1);
    const int send = t.isend(right, work + send_offset, send_bytes);
    if (s + 1 < steps) {
      const auto [offset, bytes] = span_of(s + 1, 2);
      (void)offset;
      receive[(s + 1) % 2] = t.irecv(left, slot[(s + 1) % 2], bytes);
    }
    co_await t.wait(receive[s % 2], previous_send);
    const auto [recv_offset, recv_bytes] = span_of(s, 2);
    reduce_into(op, type, work + recv_offset, slot[s % 2], recv_bytes / element);
    previous_send = send;
  }
  co_await t.wait(previous_send);
}

// Before it, rank r holds block r in work; after it, every block.
Task allgather_phase(Transfers& t, std::byte* work, const Blocks& blocks, ElementType type) {
  const int p = t.size(), r = t.rank();
  const std::size_t element = type.size();
  const int right = mod(r + 1, p), left = mod(r - 1, p);
  for (int k = 0; k + 1 < p; ++k) {
    const int out = mod(r - k, p), in = mod(r - k - 1, p);
    const int send = t.isend(right, work + blocks.offset[out] * element, blocks.length[out] * element);
    const int receive = t.irecv(left, work + blocks.offset[in] * element, blocks.length[in] * element);
    co_await t.wait(send, receive);
  }
}

}  // namespace

Task ring_allreduce(Transfers& t, const Call& call, Scratch& scratch) {
  const std::size_t element = call.type.size();
  copy_bytes(call.recv, call.send, call.count * element);
  const Blocks blocks = balanced_blocks(call.count, t.size());
  co_await reduce_scatter_phase(t, call.recv, blocks, call.type, call.reduce, call.chunk_bytes,
                                scratch);
  co_await allgather_phase(t, call.recv, blocks, call.type);
}

Task ring_reduce_scatter(Transfers& t, const Call& call, Scratch& scratch) {
  const std::size_t element = call.type.size();
  const Blocks blocks = contiguous_blocks(call.counts);
  std::byte* work = scratch.get(call.bytes());
  copy_bytes(work, call.send, call.bytes());
  co_await reduce_scatter_phase(t, work, blocks, call.type, call.reduce, call.chunk_bytes, scratch);
  const int r = t.rank();
  copy_bytes(call.recv, work + blocks.offset[r] * element, blocks.length[r] * element);
}

Task ring_allgather(Transfers& t, const Call& call, Scratch&) {
  const std::size_t element = call.type.size();
  const Blocks blocks{call.displs, call.counts};
  const int r = t.rank();
  std::byte* mine = call.recv + blocks.offset[r] * element;
  copy_bytes(mine, call.send, blocks.length[r] * element);
  co_await allgather_phase(t, call.recv, blocks, call.type);
}

}  // namespace gnnrt::collectives::detail
