#include "collectives/communicator.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <fmt/format.h>
#include <numeric>
#include <stdexcept>

#include "collectives/blocking_deadline.h"
#include "collectives/error.h"
#include "collectives/work_state.h"

namespace gnnrt::collectives {
namespace detail {

std::byte* ScratchPool::acquire(std::size_t bytes, std::vector<int>& held) {
  if (bytes == 0) return nullptr;
  int best = -1;
  for (int i = 0; i < static_cast<int>(buffers_.size()); ++i) {
    const auto& b = buffers_[i];
    if (!b.used && b.size >= bytes && (best < 0 || b.size < buffers_[best].size)) best = i;
  }
  if (best < 0) {
    buffers_.push_back({std::unique_ptr<std::byte[]>(new std::byte[bytes]), bytes, false});
    best = static_cast<int>(buffers_.size()) - 1;
  }
  buffers_[best].used = true;
  held.push_back(best);
  return buffers_[best].data.get();
}

void ScratchPool::release(std::vector<int>& held) {
  for (int i : held) buffers_[i].used = false;
  held.clear();
}

CommunicatorImpl::CommunicatorImpl(MPI_Comm user_, CommunicatorOptions options_)
    : user(user_), options(std::move(options_)) {
  check_mpi(MPI_Comm_set_errhandler(user, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(user, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(user, &size), "MPI_Comm_size");
  check_mpi(MPI_Comm_dup(user, &internal), "MPI_Comm_dup");
  check_mpi(MPI_Comm_set_errhandler(internal, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_dup(user, &check), "MPI_Comm_dup");
  check_mpi(MPI_Comm_set_errhandler(check, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  int* tag_ub = nullptr;
  int found = 0;
  check_mpi(MPI_Comm_get_attr(user, MPI_TAG_UB, &tag_ub, &found), "MPI_Comm_get_attr(MPI_TAG_UB)");
  if (found && tag_ub != nullptr) tag_ub_ = *tag_ub;
  blocking_transfers.emplace(internal, 0, rank, size);
}

CommunicatorImpl::~CommunicatorImpl() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (internal != MPI_COMM_NULL) MPI_Comm_free(&internal);
  if (check != MPI_COMM_NULL) MPI_Comm_free(&check);
  if (user != MPI_COMM_NULL) MPI_Comm_free(&user);
}

int CommunicatorImpl::next_tag(uint64_t signature) {
  if (tag_ub_ < 0x7fffffff) return static_cast<int>(sequence_++ % static_cast<std::uint64_t>(tag_ub_));
  const auto sequence = sequence_++ & ((1u << kSequenceBits) - 1);
  return static_cast<int>(sequence | ((signature & 0x7fff) << kSequenceBits));
}

void CommunicatorImpl::progress_all() {
  for (std::size_t i = 0; i < in_flight.size();) {
    // A finished operation removes itself from the list.
    if (!in_flight[i]->progress()) ++i;
  }
}

namespace {

Task point_to_point_task(Transfers& t, bool sending, std::byte* data, std::size_t bytes, int peer) {
  co_await t.wait(sending ? t.isend(peer, data, bytes) : t.irecv(peer, data, bytes));
}

}  // namespace
}  // namespace detail

CommunicatorOptions CommunicatorOptions::from_environment() {
  CommunicatorOptions options;
  if (const char* text = std::getenv("GNNRT_COLLECTIVE_TIMEOUT")) {
    char* end = nullptr;
    const double seconds = std::strtod(text, &end);
    if (end == text || *end != '\0' || !(seconds > 0)) {
      throw std::invalid_argument(std::string("GNNRT_COLLECTIVE_TIMEOUT='") + text +
                                  "' is not a positive number of seconds");
    }
    options.timeout_seconds = seconds;
  }
  if (const char* text = std::getenv("GNNRT_COLLECTIVE_ALGORITHM")) {
    options.algorithm = parse_algorithm(text);
  }
  if (const char* text = std::getenv("GNNRT_COLLECTIVE_TUNING")) {
    options.tuning = std::make_shared<const TuningTable>(TuningTable::load(text));
  }
  if (const char* text = std::getenv("GNNRT_COLLECTIVE_CHECK")) {
    const std::string v = text;
    if (v != "0" && v != "1") {
      throw std::invalid_argument("GNNRT_COLLECTIVE_CHECK='" + v + "' is not 0 or 1");
    }
    options.check_calls = v == "1";
  }
  return options;
}

Communicator::Communicator(std::shared_ptr<detail::CommunicatorImpl> impl)
    : impl_(std::move(impl)) {}

Communicator Communicator::world(CommunicatorOptions options) {
  return wrap(MPI_COMM_WORLD, std::move(options));
}

Communicator Communicator::wrap(MPI_Comm comm, CommunicatorOptions options) {
  MPI_Comm dup;
  check_mpi(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup");
  return Communicator(std::make_shared<detail::CommunicatorImpl>(dup, std::move(options)));
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }
MPI_Comm Communicator::mpi_comm() const { return impl_->user; }
const CommunicatorOptions& Communicator::options() const { return impl_->options; }
void Communicator::set_options(CommunicatorOptions options) { impl_->options = std::move(options); }

std::optional<Communicator> Communicator::split(int color, int key) const {
  MPI_Comm part;
  check_mpi(MPI_Comm_split(impl_->user, color < 0 ? MPI_UNDEFINED : color, key, &part),
            "MPI_Comm_split");
  if (part == MPI_COMM_NULL) return std::nullopt;
  return Communicator(std::make_shared<detail::CommunicatorImpl>(part, impl_->options));
}

Algorithm Communicator::resolve(Collective op, std::size_t bytes, Algorithm requested) const {
  if (requested != Algorithm::automatic) {
    if (!implements(requested, op)) {
      throw std::invalid_argument(std::string(name(op)) + " has no algorithm '" +
                                  std::string(name(requested)) + "'");
    }
    return requested;
  }
  const auto& options = impl_->options;
  if (options.algorithm != Algorithm::automatic && implements(options.algorithm, op)) {
    return options.algorithm;
  }
  const TuningTable& table = options.tuning ? *options.tuning : TuningTable::defaults();
  return table.choose(op, bytes, impl_->size);
}

void Communicator::set_blocking(bool blocking) { impl_->blocking = blocking; }

template <typename Checks>
void Communicator::guard(const detail::CallFingerprint& fp, Checks&& checks) {
  std::exception_ptr local;
  try {
    checks();
  } catch (...) {
    local = std::current_exception();
  }
  if (impl_->options.check_calls) {
    detail::agree_on_call(*impl_, fp, std::move(local));
  } else if (local) {
    std::rethrow_exception(local);
  }
}

Work Communicator::start(Call call, Algorithm requested) {
  call.chunk_bytes = impl_->options.chunk_bytes;
  // alltoallv's size differs from rank to rank, and every rank must pick the
  // same algorithm: it is chosen by rank count alone (key 0 bytes).
  const std::size_t key = call.op == Collective::alltoallv ? 0 : call.bytes();
  const Algorithm algorithm = resolve(call.op, key, requested);
  // Without the call checks, a native call's signature is verified beside
  // it (MPI's own messages cannot carry it): ranks that called with
  // another count never return MPI's answer (a short message or a silent
  // partial broadcast), they get an error.
  if (algorithm == Algorithm::native && !impl_->options.check_calls && call.op != Collective::barrier) {
    call.verify = impl_->check;
  }
  if (impl_->blocking) {
    if (algorithm == Algorithm::native) {
      detail::native_blocking(call, impl_->internal, impl_->rank, impl_->options.timeout_seconds);
    } else {
      detail::run_blocking(*impl_, call, algorithm);
    }
    return Work();
  }
  auto state = std::make_unique<detail::WorkState>(impl_, std::string(), impl_->internal,
                                                   impl_->next_tag(call.signature));
  state->algorithm = algorithm;
  state->call = std::move(call);
  state->launch(detail::run(algorithm, state->transfers, state->call, state->scratch));
  return Work(std::move(state));
}

Work Communicator::point_to_point(bool sending, std::byte* data, std::size_t bytes, int peer,
                                  int tag) {
  auto state = std::make_unique<detail::WorkState>(
      impl_, fmt::format("{}({} bytes, peer {}, tag {})", sending ? "send" : "recv", bytes, peer, tag),
      impl_->user, tag);
  state->launch(detail::point_to_point_task(state->transfers, sending, data, bytes, peer));
  return Work(std::move(state));
}

namespace {

[[noreturn]] void size_error(const Communicator& comm, std::string_view op, std::string_view arg,
                             std::size_t actual, std::size_t expected) {
  throw CollectiveError(fmt::format("rank {}: {}: {} has {} elements, expected {}", comm.rank(),
                                    op, arg, actual, expected));
}

void check_size(const Communicator& comm, std::string_view op, std::string_view arg,
                std::size_t actual, std::size_t expected) {
  if (actual != expected) size_error(comm, op, arg, actual, expected);
}

void check_counts(const Communicator& comm, std::string_view op, std::size_t counts) {
  if (counts != static_cast<std::size_t>(comm.size())) {
    throw CollectiveError(fmt::format("rank {}: {}: counts has {} entries, expected one per rank ({})",
                                      comm.rank(), op, counts, comm.size()));
  }
}

void check_peer(const Communicator& comm, std::string_view op, int peer) {
  if (peer < 0 || peer >= comm.size()) {
    throw CollectiveError(fmt::format("rank {}: {}: rank {} is outside [0, {})", comm.rank(), op,
                                      peer, comm.size()));
  }
}

template <typename T>
const std::byte* bytes_of(std::span<const T> s) {
  return reinterpret_cast<const std::byte*>(s.data());
}
template <typename T>
std::byte* bytes_of(std::span<T> s) {
  return reinterpret_cast<std::byte*>(s.data());
}

template <typename T>
detail::CallFingerprint fingerprint(Collective op, std::size_t count, ReduceOp reduce = ReduceOp::sum,
                                    int root = -1, std::span<const std::size_t> counts = {}) {
  const ElementType type = element_type_v<T>;
  detail::CallFingerprint fp;
  fp.op = static_cast<int64_t>(op);
  fp.type = static_cast<int64_t>(type.dtype) * 2 + (type.located ? 1 : 0);
  fp.reduce = static_cast<int64_t>(reduce);
  fp.count = static_cast<int64_t>(count);
  fp.root = root;
  fp.counts = counts.empty() ? 0 : detail::hash_counts(counts);
  return fp;
}

// The fields every collective's Call has.
template <typename T>
Call make_call(Collective op, std::span<const T> send, std::span<T> recv) {
  Call call;
  call.op = op;
  call.type = element_type_v<T>;
  call.send = bytes_of(send);
  call.recv = bytes_of(recv);
  return call;
}

// Per-rank blocks back to back: their counts and displacements.
void set_blocks(std::vector<std::size_t>& counts, std::vector<std::size_t>& displs,
                std::span<const std::size_t> from) {
  counts.assign(from.begin(), from.end());
  displs = detail::contiguous_blocks(counts).offset;
}

std::size_t total(std::span<const std::size_t> counts) {
  return std::accumulate(counts.begin(), counts.end(), std::size_t{0});
}

}  // namespace

template <typename T>
Work Communicator::allreduce_async(std::span<const T> send, std::span<T> recv, ReduceOp op,
                                   Algorithm algorithm) {
  const auto fp = fingerprint<T>(Collective::allreduce, send.size(), op);
  guard(fp, [&] {
    check_reduce(op, element_type_v<T>);
    check_size(*this, "allreduce", "recv", recv.size(), send.size());
    resolve(Collective::allreduce, send.size_bytes(), algorithm);
  });
  Call call = make_call(Collective::allreduce, send, recv);
  call.signature = detail::signature(fp);
  call.reduce = op;
  call.count = send.size();
  return start(std::move(call), algorithm);
}

template <typename T>
Work Communicator::reduce_scatter_async(std::span<const T> send, std::span<T> recv, ReduceOp op,
                                        Algorithm algorithm) {
  const std::vector<std::size_t> counts(size(), recv.size());
  return reduce_scatter_v_async<T>(send, recv, counts, op, algorithm);
}

template <typename T>
Work Communicator::reduce_scatter_v_async(std::span<const T> send, std::span<T> recv,
                                          std::span<const std::size_t> counts, ReduceOp op,
                                          Algorithm algorithm) {
  const auto fp = fingerprint<T>(Collective::reduce_scatter, send.size(), op, -1, counts);
  guard(fp, [&] {
    check_reduce(op, element_type_v<T>);
    check_counts(*this, "reduce_scatter", counts.size());
    check_size(*this, "reduce_scatter", "send", send.size(), total(counts));
    check_size(*this, "reduce_scatter", "recv", recv.size(), counts[rank()]);
  });
  Call call = make_call(Collective::reduce_scatter, send, recv);
  call.signature = detail::signature(fp);
  call.reduce = op;
  set_blocks(call.counts, call.displs, counts);
  return start(std::move(call), algorithm);
}

template <typename T>
Work Communicator::allgather_async(std::span<const T> send, std::span<T> recv, Algorithm algorithm) {
  const std::vector<std::size_t> counts(size(), send.size());
  return allgather_v_async<T>(send, recv, counts, algorithm);
}

template <typename T>
Work Communicator::allgather_v_async(std::span<const T> send, std::span<T> recv,
                                     std::span<const std::size_t> counts, Algorithm algorithm) {
  const auto fp = fingerprint<T>(Collective::allgather, recv.size(), ReduceOp::sum, -1, counts);
  guard(fp, [&] {
    check_counts(*this, "allgather", counts.size());
    check_size(*this, "allgather", "send", send.size(), counts[rank()]);
    check_size(*this, "allgather", "recv", recv.size(), total(counts));
  });
  Call call = make_call(Collective::allgather, send, recv);
  call.signature = detail::signature(fp);
  set_blocks(call.counts, call.displs, counts);
  return start(std::move(call), algorithm);
}

template <typename T>
Work Communicator::broadcast_async(std::span<T> data, int root, Algorithm algorithm) {
  const auto fp = fingerprint<T>(Collective::broadcast, data.size(), ReduceOp::sum, root);
  guard(fp, [&] { check_peer(*this, "broadcast", root); });
  Call call = make_call(Collective::broadcast, std::span<const T>(data), data);
  call.signature = detail::signature(fp);
  call.count = data.size();
  call.root = root;
  return start(std::move(call), algorithm);
}

template <typename T>
Work Communicator::alltoallv_async(std::span<const T> send, std::span<const std::size_t> send_counts,
                                   std::span<T> recv, std::span<const std::size_t> recv_counts,
                                   Algorithm algorithm) {
  const auto fp = fingerprint<T>(Collective::alltoallv, 0);
  guard(fp, [&] {
    check_counts(*this, "alltoallv", send_counts.size());
    check_counts(*this, "alltoallv", recv_counts.size());
    check_size(*this, "alltoallv", "send", send.size(), total(send_counts));
    check_size(*this, "alltoallv", "recv", recv.size(), total(recv_counts));
  });
  if (impl_->options.check_calls) {
    // What each peer sends this rank must be what this rank expects from it.
    std::vector<int64_t> sends(send_counts.begin(), send_counts.end()), theirs(size());
    {
      detail::BlockingDeadline deadline("call check", "native", sends.size() * 8, rank(),
                                        impl_->options.timeout_seconds);
      check_mpi(MPI_Alltoall(sends.data(), 1, MPI_INT64_T, theirs.data(), 1, MPI_INT64_T, impl_->check),
                "MPI_Alltoall (call check)");
    }
    std::string problem;
    for (int q = 0; q < size() && problem.empty(); ++q) {
      if (static_cast<std::size_t>(theirs[q]) != recv_counts[q]) {
        problem = fmt::format("rank {}: alltoallv: rank {} sends {} elements to this rank, which "
                              "expects {} (recv_counts[{}])", rank(), q, theirs[q], recv_counts[q], q);
      }
    }
    detail::agree_on_problem(*impl_, fp, problem);
  }
  Call call = make_call(Collective::alltoallv, send, recv);
  call.signature = detail::signature(fp);
  set_blocks(call.counts, call.displs, send_counts);
  set_blocks(call.recv_counts, call.recv_displs, recv_counts);
  return start(std::move(call), algorithm);
}

Work Communicator::barrier_async() {
  guard(fingerprint<int32_t>(Collective::barrier, 0), [] {});
  Call call;
  call.op = Collective::barrier;
  return start(std::move(call), Algorithm::native);
}

template <typename T>
Work Communicator::send_async(std::span<const T> data, int peer, int tag) {
  check_peer(*this, "send", peer);
  return point_to_point(true, const_cast<std::byte*>(bytes_of(data)), data.size_bytes(), peer, tag);
}

template <typename T>
Work Communicator::recv_async(std::span<T> data, int peer, int tag) {
  check_peer(*this, "recv", peer);
  return point_to_point(false, bytes_of(data), data.size_bytes(), peer, tag);
}

#define GNNRT_COMMUNICATOR_REDUCING(T)                                                           \
  template Work Communicator::allreduce_async<T>(std::span<const T>, std::span<T>, ReduceOp,    \
                                                 Algorithm);                                      \
  template Work Communicator::reduce_scatter_async<T>(std::span<const T>, std::span<T>,          \
                                                      ReduceOp, Algorithm);                       \
  template Work Communicator::reduce_scatter_v_async<T>(                                         \
      std::span<const T>, std::span<T>, std::span<const std::size_t>, ReduceOp, Algorithm);
#define GNNRT_COMMUNICATOR_MOVING(T)                                                             \
  template Work Communicator::allgather_async<T>(std::span<const T>, std::span<T>, Algorithm);   \
  template Work Communicator::allgather_v_async<T>(std::span<const T>, std::span<T>,             \
                                                   std::span<const std::size_t>, Algorithm);      \
  template Work Communicator::broadcast_async<T>(std::span<T>, int, Algorithm);                  \
  template Work Communicator::alltoallv_async<T>(std::span<const T>,                             \
                                                 std::span<const std::size_t>, std::span<T>,      \
                                                 std::span<const std::size_t>, Algorithm);        \
  template Work Communicator::send_async<T>(std::span<const T>, int, int);                       \
  template Work Communicator::recv_async<T>(std::span<T>, int, int);
#define GNNRT_COMMUNICATOR_TYPE(T) \
  GNNRT_COMMUNICATOR_REDUCING(T)   \
  GNNRT_COMMUNICATOR_MOVING(T)     \
  GNNRT_COMMUNICATOR_REDUCING(ValueLoc<T>) \
  GNNRT_COMMUNICATOR_MOVING(ValueLoc<T>)

GNNRT_COMMUNICATOR_TYPE(float)
GNNRT_COMMUNICATOR_TYPE(double)
GNNRT_COMMUNICATOR_TYPE(int32_t)
GNNRT_COMMUNICATOR_TYPE(int64_t)

}  // namespace gnnrt::collectives
