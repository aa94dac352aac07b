// The op table the family files under runtime/defs/ fill: every op of
// GNNRT_FOR_EACH_OP once, each with its shape rule and both kernels.
#include "runtime/op_defs.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace gnnrt::runtime {
namespace {

TEST(OpTable, EveryOpIsDefinedOnce) {
  int ops = 0;
#define GNNRT_OP_SEEN(k, name)                      \
  {                                                 \
    const OpDef& d = op_def(OpKind::k);             \
    EXPECT_EQ(d.kind, OpKind::k) << name;           \
    EXPECT_NE(d.shape, nullptr) << name;            \
    EXPECT_NE(d.run_f32, nullptr) << name;          \
    EXPECT_NE(d.run_f64, nullptr) << name;          \
    if ((d.flags & kNoGradient) != 0) {             \
      EXPECT_EQ(d.gradient, nullptr) << name;       \
    }                                               \
    ++ops;                                          \
  }
  GNNRT_FOR_EACH_OP(GNNRT_OP_SEEN)
#undef GNNRT_OP_SEEN
  EXPECT_GT(ops, 80);
  // The differentiable forward ops have their gradient rule beside them.
  for (OpKind k : {OpKind::kMatMul, OpKind::kSpmm, OpKind::kLayerNorm, OpKind::kAttentionSoftmax,
                   OpKind::kHaloSum, OpKind::kHeadMatMul, OpKind::kCrossEntropy}) {
    EXPECT_NE(op_def(k).gradient, nullptr) << to_string(k);
  }
}

TEST(OpTable, AnOpDefinedTwiceOrNotAtAllIsNamed) {
  OpTable t;
  EXPECT_THROW(t.check_complete(), std::logic_error);
  try {
    t.check_complete();
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("op fill has no definition"), std::string::npos) << e.what();
  }
  t.add(op_def(OpKind::kMatMul));
  EXPECT_THROW(t.add(op_def(OpKind::kMatMul)), std::logic_error);
}

}  // namespace
}  // namespace gnnrt::runtime
