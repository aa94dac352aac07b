// Link prediction on sampled blocks (docs/sampling.md, "Link prediction"):
// the job's `link` section. The graph's edges are split with PyG's
// RandomLinkSplit meaning (model/sampling/link_split.h); each epoch the
// supervision edges are shuffled and cut into global batches, each
// positive pair joined by negative_ratio fresh negatives; a batch's seeds
// are its pairs' endpoints (LinkNeighborLoader's meaning), sampled into
// blocks like node seeds, and the model scores each pair from its
// endpoints' rows. Validation and test score their fixed pairs by
// layer-wise inference over their own message-passing graphs.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "model/data/node_shard.h"
#include "model/job.pb.h"
#include "model/sampling/link_split.h"
#include "model/sampling/seed_batches.h"
#include "model/training/sampled_batches.h"

namespace gnnrt::model {

// Whether a job predicts links.
inline bool is_link_job(const proto::Job& job) { return job.has_link(); }

// The job a link job runs: without sampling.fanout, full batch (-1 per
// convolution of the layer chain, every supervision edge in one batch).
proto::Job link_job(const proto::Job& job);

// The split and rank `rank`'s shards of the training, validation and test
// message-passing graphs. Every rank reads the whole edge list to split it
// (the split needs every edge), then keeps its shards.
struct LinkGraphs {
  LinkSplit split;
  NodeShard train, val, test;  // training, validation and test message passing
  EdgeList val_pairs, test_pairs;  // positives, then negatives
};
LinkGraphs load_link_graphs(const proto::Job& job, int rank, int ranks);

// The model a link job trains, over sampled_schema(hops, ..., link): the
// layer chain's layers as modules on blocks hops - 1 .. 0 (the last gives
// the embeddings), the decoder on "pairs" ("score": a dot product, or an
// MLP of the endpoints' product) and BCE with logits against "pairs.y"; a
// module graph as given.
proto::Model link_model(const proto::Model& model, int hops, const proto::Link& link);

// A layer chain's link model (link_model's) in two: the chain up to the
// embeddings, and the decoder reading them as hop 0's features (the
// evaluation over node shards, ShardedLinkScores). None for a module graph.
struct LinkModelParts {
  proto::Model embeddings, decoder;
};
std::optional<LinkModelParts> split_link_model(const proto::Model& given, const proto::Model& link, int hops);

// The epoch's global batches of scored pairs: the supervision edges in an
// order drawn from (seed, epoch), batch_size of them a batch, and after
// them their negatives: the epoch's negatives at the batch's positions
// times negative_ratio (keyed by the epoch, so any rank count draws them
// alike).
class LinkBatches {
 public:
  LinkBatches(const LinkSplit& split, const proto::Job& job);

  int64_t batches_per_epoch() const { return positives_.batches_per_epoch(); }
  // Rank `rank`'s share of batch (epoch, index): `seeds` its pairs'
  // endpoints (distinct, ascending), `out`'s pairs as indices into them,
  // their labels and the global batch's pair count.
  void make(int64_t epoch, int64_t index, int rank, int ranks, std::vector<int32_t>& seeds, SampledBatch& out);

 private:
  const LinkSplit& split_;
  const uint64_t seed_;
  const double ratio_;
  const bool undirected_;
  SeedBatches positives_;  // indices into split.train_supervision
  int64_t negatives_epoch_ = -1;
  EdgeList negatives_;
};

struct LinkScores {
  double auc = 0, hits = 0, mrr = 0;
};
// The scores of `pairs` (positives first, then `negatives` of them).
LinkScores link_scores(std::span<const float> scores, int64_t negatives, int64_t hits_k);

}  // namespace gnnrt::model
