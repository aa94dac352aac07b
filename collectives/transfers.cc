#include "collectives/transfers.h"

#include <climits>
#include <utility>

#include "collectives/error.h"

namespace gnnrt::collectives::detail {
namespace {

int message_bytes(std::size_t bytes) {
  if (bytes > static_cast<std::size_t>(INT_MAX)) {
    throw CollectiveError("a message of " + std::to_string(bytes) +
                          " bytes exceeds MPI's int count (2 GiB); split the buffer");
  }
  return static_cast<int>(bytes);
}

}  // namespace

Transfers::Transfers(MPI_Comm comm, int tag, int rank, int size)
    : comm_(comm), tag_(tag), rank_(rank), size_(size) {}

Transfers::~Transfers() { abandon(); }

void Transfers::reset(int tag) {
  abandon();
  tag_ = tag;
  requests_.clear();
  peers_.clear();
  receives_.clear();
  bytes_.clear();
  live_slot_.clear();
  free_.clear();
  suspended_ = {};
}

int Transfers::add(MPI_Request request, int peer, bool receive, std::size_t bytes) {
  int slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
    requests_[slot] = request;
    peers_[slot] = peer;
    receives_[slot] = receive;
    bytes_[slot] = bytes;
    live_slot_[slot] = 1;
  } else {
    slot = static_cast<int>(requests_.size());
    requests_.push_back(request);
    peers_.push_back(peer);
    receives_.push_back(receive);
    bytes_.push_back(bytes);
    live_slot_.push_back(1);
  }
  ++live_;
  return slot;
}

int Transfers::isend(int peer, const void* data, std::size_t bytes) {
  MPI_Request request;
  const int rc = MPI_Isend(data, message_bytes(bytes), MPI_BYTE, peer, tag_, comm_, &request);
  if (rc != MPI_SUCCESS) check_mpi(rc, "MPI_Isend to rank " + std::to_string(peer));
  return add(request, peer, false);
}

int Transfers::irecv(int peer, void* data, std::size_t bytes) {
  MPI_Request request;
  const int rc = MPI_Irecv(data, message_bytes(bytes), MPI_BYTE, peer, tag_, comm_, &request);
  if (rc != MPI_SUCCESS) check_mpi(rc, "MPI_Irecv from rank " + std::to_string(peer));
  return add(request, peer, true, bytes);
}

int Transfers::adopt(MPI_Request request, int peer) { return add(request, peer, true); }

Transfers::Awaiter Transfers::wait(int slot, int other) {
  awaited_.clear();
  if (slot >= 0) awaited_.push_back(slot);
  if (other >= 0) awaited_.push_back(other);
  return Awaiter{this};
}

Transfers::Awaiter Transfers::wait_all() {
  awaited_.clear();
  for (int slot = 0; slot < static_cast<int>(requests_.size()); ++slot) {
    if (live_slot_[slot]) awaited_.push_back(slot);
  }
  return Awaiter{this};
}

bool Transfers::poll() {
  if (awaited_.empty()) return true;
  testing_.clear();
  for (int slot : awaited_) testing_.push_back(requests_[slot]);
  int done = 0;
  statuses_.resize(testing_.size());
  int rc = MPI_Testall(static_cast<int>(testing_.size()), testing_.data(), &done, statuses_.data());
  for (std::size_t i = 0; i < awaited_.size(); ++i) requests_[awaited_[i]] = testing_[i];
  if (rc == MPI_ERR_IN_STATUS) {  // report the failed request's own error
    for (const auto& status : statuses_) {
      if (status.MPI_ERROR != MPI_SUCCESS && status.MPI_ERROR != MPI_ERR_PENDING) {
        rc = status.MPI_ERROR;
        break;
      }
    }
  }
  // (The message is built only on failure: poll() is the hot loop.)
  if (rc != MPI_SUCCESS) check_mpi(rc, "MPI_Testall (" + pending_description() + ")");
  if (!done) return false;
  // A message shorter than its receive: the sender's call was another one
  // (truncation, a longer one, is MPI's error above).
  for (std::size_t i = 0; i < awaited_.size(); ++i) {
    const int slot = awaited_[i];
    if (!receives_[slot] || peers_[slot] < 0) continue;
    int got = 0;
    MPI_Get_count(&statuses_[i], MPI_BYTE, &got);
    if (static_cast<std::size_t>(got) != bytes_[slot]) {
      throw CollectiveError("received " + std::to_string(got) + " bytes from rank " + std::to_string(peers_[slot]) +
                            ", expected " + std::to_string(bytes_[slot]) +
                            ": the ranks called this collective with different counts");
    }
  }
  for (int slot : awaited_) {
    free_.push_back(slot);
    live_slot_[slot] = 0;
    --live_;
  }
  awaited_.clear();
  return true;
}

int Transfers::foreign_sender() const {
  constexpr int kSequence = (1 << 16) - 1;  // CommunicatorImpl::kSequenceBits
  for (int slot : awaited_) {
    if (requests_[slot] == MPI_REQUEST_NULL || !receives_[slot] || peers_[slot] < 0) continue;
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(peers_[slot], MPI_ANY_TAG, comm_, &flag, &status) != MPI_SUCCESS || !flag) continue;
    if (status.MPI_TAG != tag_ && (status.MPI_TAG & kSequence) == (tag_ & kSequence)) return peers_[slot];
  }
  return -1;
}

std::string Transfers::pending_description() const {
  std::string text;
  for (int slot : awaited_) {
    if (requests_[slot] == MPI_REQUEST_NULL) continue;
    if (!text.empty()) text += ", ";
    const int peer = peers_[slot];
    if (peer < 0) {
      text += "the native MPI call";
    } else {
      text += receives_[slot] ? "a message from rank " : "a send to rank ";
      text += std::to_string(peer);
    }
  }
  return text.empty() ? "nothing" : text;
}

void Transfers::abandon() {
  // Only point-to-point receives can be cancelled; a native collective's or
  // a send's request is left to MPI (this runs only after a failure).
  for (std::size_t slot = 0; slot < requests_.size(); ++slot) {
    auto& request = requests_[slot];
    if (request == MPI_REQUEST_NULL || !receives_[slot] || peers_[slot] < 0) continue;
    MPI_Cancel(&request);
    MPI_Request_free(&request);
  }
  live_ = 0;
  awaited_.clear();
}

}  // namespace gnnrt::collectives::detail

