#include "model/training/link_task.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "model/data/node_shard_files.h"
#include "model/data/products.h"
#include "model/modules/network.h"
#include "model/training/sampled_source.h"

namespace gnnrt::model {
namespace {

// The whole graph as a dataset: loaded, or the products-like graph made on
// one rank (its in-edges as the edge list).
Dataset link_dataset(const proto::Job& job) {
  if (!job.partition().shards().empty()) {
    throw std::invalid_argument(fmt::format(
        "partition.shards = {}: a link job splits the whole edge list on every rank, so it reads no shards "
        "(node classification jobs do)", job.partition().shards()));
  }
  if (generates_products(job)) {
    NodeShard s = make_products_shard(parse_products_spec(job.dataset().path()), 0, 1);
    Dataset d;
    d.name = s.name;
    d.num_nodes = s.num_nodes;
    d.num_features = s.num_features;
    d.num_classes = s.num_classes;
    d.x = std::move(s.x);
    d.y.assign(s.y.begin(), s.y.end());
    for (int64_t v = 0; v < s.num_nodes; ++v) {
      for (const int32_t u : s.in_neighbors(v)) {
        d.src.push_back(u);
        d.dst.push_back(v);
      }
    }
    d.train_mask.assign(static_cast<size_t>(d.num_nodes), 0);
    d.val_mask = d.test_mask = d.train_mask;
    return d;
  }
  return load_sampled_dataset(job);
}

// Rank `rank`'s shard of `d` with the edges of `graph` instead of its own
// (`metis`: owned by METIS parts of that graph).
NodeShard shard_with(Dataset& d, const EdgeList& graph, int rank, int ranks, bool metis = false, uint64_t seed = 0) {
  std::vector<int64_t> src(graph.src.begin(), graph.src.end()), dst(graph.dst.begin(), graph.dst.end());
  std::swap(d.src, src);
  std::swap(d.dst, dst);
  NodeShard s = node_shard(d, rank, ranks, false, metis ? metis_owners(d, ranks, seed) : std::vector<int32_t>{});
  std::swap(d.src, src);
  std::swap(d.dst, dst);
  return s;
}

EdgeList joined(const EdgeList& a, const EdgeList& b) {
  EdgeList out = a;
  out.src.insert(out.src.end(), b.src.begin(), b.src.end());
  out.dst.insert(out.dst.end(), b.dst.begin(), b.dst.end());
  return out;
}

bool is_conv(proto::Layer::Type t) {
  return t == proto::Layer::GCN || t == proto::Layer::SAGE || t == proto::Layer::GAT || t == proto::Layer::GIN;
}

}  // namespace

proto::Job link_job(const proto::Job& job) {
  proto::Job out = job;
  if (!is_link_job(job) || job.sampling().fanout_size() > 0) return out;
  if (job.model().module_size() > 0) {
    throw std::invalid_argument("link with a module graph needs sampling.fanout (one hop per convolution)");
  }
  for (const proto::Layer& l : job.model().layer()) {
    if (is_conv(l.type())) out.mutable_sampling()->add_fanout(-1);
  }
  if (out.sampling().fanout_size() == 0) throw std::invalid_argument("link: model.layer has no convolution");
  out.mutable_sampling()->set_batch_size(std::numeric_limits<int32_t>::max());
  out.mutable_sampling()->set_drop_last(false);  // the one batch is every supervision edge
  return out;
}

LinkGraphs load_link_graphs(const proto::Job& job, int rank, int ranks) {
  Dataset d = link_dataset(job);
  const proto::Link& l = job.link();
  LinkSplitOptions o;
  o.val = l.val_fraction();
  o.test = l.test_fraction();
  o.disjoint_train_ratio = l.disjoint_train_ratio();
  o.negative_ratio = l.eval_negative_ratio();
  o.undirected = l.undirected();
  o.seed = job.seed();
  LinkGraphs g;
  g.split = split_links(d.num_nodes, d.src, d.dst, o);
  if (g.split.train_supervision.size() == 0) {
    throw std::invalid_argument(fmt::format("link: no training edges (the graph has {}; link.val_fraction = {}, "
                                            "link.test_fraction = {})", d.num_edges(), o.val, o.test));
  }
  g.train = shard_with(d, g.split.train_graph, rank, ranks, metis_ownership(job, ranks), job.seed());
  // The evaluation's graphs, this rank's range of each: on one rank, or a
  // layer chain's model over the shards (a module graph is not evaluated
  // on many ranks).
  if (ranks == 1 || job.model().module_size() == 0) {
    g.val = shard_with(d, g.split.val_graph, rank, ranks);
    g.test = shard_with(d, g.split.test_graph, rank, ranks);
  }
  g.val_pairs = joined(g.split.val, g.split.val_negatives);
  g.test_pairs = joined(g.split.test, g.split.test_negatives);
  return g;
}

proto::Model link_model(const proto::Model& model, int hops, const proto::Link& link) {
  if (model.module_size() > 0) return model;
  for (int i = 0; i < model.layer_size(); ++i) {
    const proto::Layer& l = model.layer(i);
    if ((is_conv(l.type()) || l.type() == proto::Layer::LINEAR) && l.out() < 1) {
      throw std::invalid_argument(fmt::format("model.layer[{}].out: a link model's layers give their widths (there "
                                              "are no classes to default to)", i));
    }
  }
  proto::Model out = chain_on_blocks(model, hops, 0);
  const std::string embeddings = out.module(out.module_size() - 1).name();
  int64_t width = 0;
  for (const proto::Layer& l : model.layer()) {
    if (l.out() > 0) width = l.out();
  }
  if (link.decoder() == proto::Link::DOT) {
    auto& m = *out.add_module();
    m.set_name("score");
    m.add_input(embeddings);
    m.mutable_edge_dot()->set_edges(kPairsSet);
  } else {
    for (const bool destination : {false, true}) {
      auto& m = *out.add_module();
      m.set_name(destination ? "pair_dst" : "pair_src");
      m.add_input(embeddings);
      m.mutable_gather()->set_edges(kPairsSet);
      m.mutable_gather()->set_destination(destination);
    }
    auto& product = *out.add_module();
    product.set_name("pair");
    product.add_input("pair_src");
    product.add_input("pair_dst");
    product.mutable_mul();
    auto& m = *out.add_module();
    m.set_name("score");
    m.add_input("pair");
    auto& mlp = *m.mutable_mlp();
    if (link.decoder_hidden_size() == 0) mlp.add_hidden(width);
    for (const int64_t h : link.decoder_hidden()) mlp.add_hidden(h);
    mlp.set_out(1);
  }
  auto& t = *out.add_loss_term();
  t.set_kind(proto::LossTerm::BCE_WITH_LOGITS);
  t.set_input("score");
  t.set_target(target_name(kPairsSet));
  return out;
}

std::optional<LinkModelParts> split_link_model(const proto::Model& given, const proto::Model& link, int hops) {
  if (given.module_size() > 0) return std::nullopt;
  const int chain = chain_on_blocks(given, hops, 0).module_size();
  LinkModelParts parts;
  for (int i = 0; i < chain; ++i) *parts.embeddings.add_module() = link.module(i);
  const std::string embeddings = link.module(chain - 1).name();
  for (int i = chain; i < link.module_size(); ++i) {
    proto::Module m = link.module(i);
    for (auto& input : *m.mutable_input()) {
      if (input == embeddings) input = features_name(hop_set_name(0));
    }
    *parts.decoder.add_module() = std::move(m);
  }
  return parts;
}

LinkBatches::LinkBatches(const LinkSplit& split, const proto::Job& job)
    : split_(split), seed_(job.seed()), ratio_(job.link().negative_ratio()), undirected_(job.link().undirected()),
      positives_(
          [&] {
            std::vector<int32_t> ids(static_cast<size_t>(split.train_supervision.size()));
            for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
            return ids;
          }(),
          job.sampling().batch_size(), job.sampling().shuffle(), job.sampling().drop_last(), job.seed()) {
  if (!(ratio_ >= 0)) throw std::invalid_argument(fmt::format("link.negative_ratio = {} is below 0", ratio_));
  const auto wanted = static_cast<int64_t>(std::floor(static_cast<double>(positives_.num_seeds()) * ratio_));
  if (wanted > link_non_edges(split, undirected_)) {
    throw std::invalid_argument(fmt::format("link.negative_ratio = {} asks for {} training negatives an epoch; the "
                                            "graph has only {} non-edges", ratio_, wanted,
                                            link_non_edges(split, undirected_)));
  }
}

void LinkBatches::make(int64_t epoch, int64_t index, int rank, int ranks, std::vector<int32_t>& seeds,
                       SampledBatch& out) {
  const int64_t total = positives_.num_seeds();
  // Negatives at the epoch's positions: batch positions [begin, end) own
  // negatives [floor(begin r), floor(end r)).
  const auto negative_at = [&](int64_t position) {
    return static_cast<int64_t>(std::floor(static_cast<double>(position) * ratio_));
  };
  if (negatives_epoch_ != epoch) {
    negatives_ = training_negatives(split_, negative_at(total), seed_, epoch, undirected_);
    negatives_epoch_ = epoch;
  }
  const std::span<const int32_t> batch = positives_.batch(epoch, index);
  const int64_t begin = index * positives_.batch_size(), end = begin + static_cast<int64_t>(batch.size());
  const int64_t neg_begin = negative_at(begin), neg_end = negative_at(end);
  // The global batch's pairs: positives, then negatives; this rank's run of them.
  const int64_t pairs = static_cast<int64_t>(batch.size()) + neg_end - neg_begin;
  const auto r = static_cast<size_t>(rank), k = static_cast<size_t>(ranks), n = static_cast<size_t>(pairs);
  const auto first = static_cast<int64_t>(n * r / k), last = static_cast<int64_t>(n * (r + 1) / k);
  EdgeList mine;
  out.pair_labels.clear();
  for (int64_t i = first; i < last; ++i) {
    const bool positive = i < static_cast<int64_t>(batch.size());
    const int64_t at = positive ? batch[static_cast<size_t>(i)] : neg_begin + i - static_cast<int64_t>(batch.size());
    const EdgeList& from = positive ? split_.train_supervision : negatives_;
    mine.src.push_back(from.src[static_cast<size_t>(at)]);
    mine.dst.push_back(from.dst[static_cast<size_t>(at)]);
    out.pair_labels.push_back(positive ? 1.0f : 0.0f);
  }
  seeds.assign(mine.src.begin(), mine.src.end());
  seeds.insert(seeds.end(), mine.dst.begin(), mine.dst.end());
  std::sort(seeds.begin(), seeds.end());
  seeds.erase(std::unique(seeds.begin(), seeds.end()), seeds.end());
  const auto row_of = [&](int32_t v) {
    return static_cast<int32_t>(std::lower_bound(seeds.begin(), seeds.end(), v) - seeds.begin());
  };
  out.pairs = {};
  for (int64_t i = 0; i < mine.size(); ++i) {
    out.pairs.src.push_back(row_of(mine.src[static_cast<size_t>(i)]));
    out.pairs.dst.push_back(row_of(mine.dst[static_cast<size_t>(i)]));
  }
  out.global_pairs = pairs;
}

LinkScores link_scores(std::span<const float> scores, int64_t negatives, int64_t hits_k) {
  const auto positives = static_cast<int64_t>(scores.size()) - negatives;
  const auto pos = scores.first(static_cast<size_t>(positives));
  const auto neg = scores.subspan(static_cast<size_t>(positives));
  return {link_auc(pos, neg), link_hits(pos, neg, hits_k), link_mrr(pos, neg)};
}

}  // namespace gnnrt::model
