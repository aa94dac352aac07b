// Sampled mini-batches of one large graph as a BatchSource
// (model/training/batch_source.h; docs/sampling.md). Each epoch cuts the
// training seeds into global batches (model/sampling/seed_batches.h); each
// rank samples its share's blocks (model/sampling/neighbor_sampler.h) on a
// background thread ahead of the step, gathers their features, pads them
// into a shape bucket (model/training/sampled_batches.h) and binds them;
// the bucket's train-step program (compiled on first use) takes the step.
// The model: the layer chain, each convolution on its block (the first on
// the outermost), or a module graph over the sampled schema's names.
#pragma once

#include <filesystem>
#include <memory>

#include "model/data/dataset.h"
#include "model/job.pb.h"
#include "model/shard.pb.h"
#include "model/training/batch_infer.h"
#include "model/training/batch_source.h"
#include "model/training/options.h"

namespace gnnrt::model {

// Whether a job trains on sampled blocks (it lists sampling.fanout, or is a link job).
bool is_sampled_job(const proto::Job& job);
// Whether a sampled job's dataset.path names the products-like generator
// (model/data/products.h), not a dataset folder.
bool generates_products(const proto::Job& job);
// A sampled job's dataset loaded whole: normalised as the job asks, dense features.
Dataset load_sampled_dataset(const proto::Job& job);

// `gnnrt partition` on a sampled job (node classification): each rank's
// node shard written once (model/data/node_shard_files.h), generated or cut
// from the dataset loaded here, with the job's ownership.
proto::ShardManifest write_sampled_shards(const std::filesystem::path& dir, const proto::Job& job, int parts);

// The model a sampled job trains, as a module graph over
// sampled_schema(hops, ...): the layer chain's layers as modules, its
// convolutions on blocks hops - 1 .. 0, and a cross-entropy term on the
// seeds; a module graph as given. Throws std::invalid_argument when the
// convolutions do not match the hops.
proto::Model sampled_model(const proto::Model& model, int hops, int64_t classes);
// The layer chain's layers as modules, its convolutions on blocks hops - 1
// .. 0 (no loss term); layers without `out` give `classes` columns.
proto::Model chain_on_blocks(const proto::Model& model, int hops, int64_t classes);

std::unique_ptr<BatchSource> make_sampled_source(const proto::Job& job, const TrainOptions& options);

// `gnnrt infer` on a sampled job: layer-wise full-neighbourhood inference
// over the whole graph with --params-in; writes each output module's rows
// for every node, [nodes, width], as <module>.npy (the last module by
// default: the logits). One rank.
InferResult infer_sampled(const proto::Job& job, const InferOptions& options);

}  // namespace gnnrt::model
