// The products-like graph ("products[:key=value,...]"): a synthetic graph
// shaped like ogbn-products (2,449,029 nodes, 61,859,140 undirected edges,
// 100 features, 47 classes), for sampled training at any size, from test
// graphs up to papers100M-like ones (nodes=111059956, edges=1615685872).
//
// A degree-corrected stochastic block model: node v has a class (47,
// Zipf-like sizes) and a weight theta_v from a power law (exponent
// `exponent`, capped so that the largest expected degree is max_degree).
// A `homophily` share of the edges join two nodes of one class, each end
// drawn in proportion to theta within the class; the rest join two nodes
// drawn in proportion to theta over the graph. Undirected, without self loops or
// repeated pairs. Features: signal * mean[class] + N(0, I) (mean[c] ~
// N(0, I)); split: train_fraction, val_fraction of the nodes, the rest test.
//
// Every draw is keyed by what it is for (Philox, ops/rng.h): a node's
// class, weight, features and split by the node; the edges by the tile
// of node chunks (2^16 ids each) they join, each tile's count and ends
// drawn from the chunks' weight sums. So a rank generates only the tiles
// that touch its range and the same graph comes out at any rank count.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "model/data/node_shard.h"

namespace gnnrt::model {

struct ProductsSpec {
  int64_t nodes = 2449029;
  int64_t edges = 61859140;     // undirected pairs drawn (repeats and loops then dropped)
  int64_t features = 100;
  int64_t classes = 47;
  uint64_t seed = 0;
  double homophily = 0.8;
  double exponent = 2.5;         // of theta's power law, P(theta > t) ~ t^(1 - exponent)
  int64_t max_degree = 17481;    // the largest expected degree (ogbn-products' largest)
  double signal = 0.25;          // class means' scale against unit noise
  double train_fraction = 0.08;  // ogbn-products: 8% train, 1.6% val
  double val_fraction = 0.016;
  bool operator==(const ProductsSpec&) const = default;
};

// "products" (the defaults) or "products:key=value,...". An unknown or
// repeated key, a malformed or out-of-range value throws DatasetError.
ProductsSpec parse_products_spec(std::string_view spec);
std::string to_string(const ProductsSpec& spec);
bool is_products_spec(std::string_view spec);

// Rank `rank`'s shard of the graph (of `ranks`). OpenMP inside; the same
// bits at any thread count.
NodeShard make_products_shard(const ProductsSpec& spec, int rank, int ranks);

}  // namespace gnnrt::model
