// What the step loop needs beyond one core to run one rank of a partitioned
// job: the agreement of every rank on each step that can fail on some ranks
// only (so no rank waits for one that has left), binding a shard to a core,
// and the checks that ranks run the same programs and keep the same
// parameters. docs/distributed.md.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/communicator.h"
#include "model/data/shard.h"
#include "model/job.pb.h"
#include "model/modules/network.h"
#include "runtime/core.h"
#include "runtime/halo.h"

namespace gnnrt::model {

// Errors about what the user gave (a job, a dataset, shards, parameter or
// checkpoint files): `gnnrt` exits 2 for these, 1 for other failures.
bool is_bad_input(const std::exception& e);

// Thrown on every rank that did not fail itself when another rank did.
class PeerFailure : public std::runtime_error {
 public:
  PeerFailure(const std::string& what, bool bad_input)
      : std::runtime_error(what), bad_input_(bad_input) {}
  bool bad_input() const { return bad_input_; }

 private:
  bool bad_input_;
};

// Collective: every rank reports whether `local` (this rank's error of the
// step called `what`, or null) is set; then a rank with an error rethrows
// it, and every other rank throws PeerFailure naming the ranks that failed,
// if any did.
void agree(collectives::Communicator& comm, std::string_view what, std::exception_ptr local);

// Runs fn on every rank, then agree()s on its outcome.
template <typename Fn>
void on_every_rank(collectives::Communicator& comm, std::string_view what, Fn&& fn) {
  std::exception_ptr local;
  try {
    fn();
  } catch (...) {
    local = std::current_exception();
  }
  agree(comm, what, local);
}

// on_every_rank when `comm` has more than one rank; else fn alone.
template <typename Fn>
void agreed_step(const std::shared_ptr<collectives::Communicator>& comm, std::string_view what, Fn&& fn) {
  if (comm && comm->size() > 1) {
    on_every_rank(*comm, what, std::forward<Fn>(fn));
  } else {
    fn();
  }
}

// Puts a shard on the core as network.h's programs expect it on a rank of
// a partitioned graph: the local graphs, features, labels, master masks, and
// the global ids, degrees and mask counts the partitioned programs read.
// Local (no communication), so its errors can be agreed on before anything
// collective starts. The shard's features and edges move to the core (they
// are emptied); ids, masks, counts and the mirror table stay.
NetworkShape bind_shard(runtime::Core& core, Shard& shard, const proto::Model& model);

// The core's Halo over the shard's mirror table (collective: every rank
// calls it; a bad or inconsistent table throws on every rank).
void bind_halo(runtime::Core& core, const Shard& shard, const collectives::Communicator& comm,
               runtime::HaloMode mode);

// Collective: every rank compares a fingerprint of what it is about to run
// (e.g. its programs built with rank-independent sizes); ranks that differ
// make every rank throw, naming them (another job, other shard shapes).
void check_same(collectives::Communicator& comm, uint64_t fingerprint, std::string_view what);

// Collective: every rank's resolved job (every field, defaults included)
// must be rank 0's, plus `extra` lines ("name=value", e.g. the dataset's
// identity). Otherwise every rank throws std::invalid_argument naming each
// field that differs and which ranks hold which value ("seed is 4 on rank
// 0, 5 on rank 1"): ranks started with different --set values stop before
// anything runs.
void check_same_job(collectives::Communicator& comm, const proto::Job& job,
                    const std::vector<std::string>& extra = {});

// Collective: every rank's "name=value" lines must be rank 0's; otherwise
// every rank throws std::invalid_argument "the ranks were started with
// different <what>: NAME is V on rank 0, W on rank 1; ..." naming each line
// that differs (a name some ranks lack: "absent on ..."). One allgather of a
// hash when they agree.
void check_same_fields(collectives::Communicator& comm, const std::vector<std::string>& lines,
                       std::string_view what);

// The job as "path=value" lines, one per leaf field (defaults included,
// repeated fields indexed: model.layer[1].out=16), in declaration order.
std::vector<std::string> job_fields(const proto::Job& job);

// Fault injection (GNNRT_FAULT=flip:RANK:EPOCH): flips the lowest bit of
// the first parameter's first value, with a warning naming the rank.
void flip_first_parameter_bit(runtime::Core& core, const std::vector<ParamDecl>& params, int rank);

// An xxHash64 of the parameters' bytes, in order.
uint64_t parameter_checksum(const runtime::Core& core, const std::vector<ParamDecl>& params);

}  // namespace gnnrt::model
