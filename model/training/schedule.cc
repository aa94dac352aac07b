#include "model/training/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace gnnrt::model {

double learning_rate(const proto::Job& job, int64_t epoch) { return learning_rate(job, epoch, job.schedule().epochs()); }

double learning_rate(const proto::Job& job, int64_t epoch, int64_t units) {
  const auto& s = job.schedule();
  const double base = job.optimizer().lr();
  if (epoch < s.warmup_epochs()) {
    return base * static_cast<double>(epoch + 1) / static_cast<double>(s.warmup_epochs());
  }
  const int64_t e = epoch - s.warmup_epochs();
  const int64_t total = std::max<int64_t>(units - s.warmup_epochs(), 1);
  if (s.lr_schedule() == proto::Schedule::STEP) return base * std::pow(s.gamma(), static_cast<double>(e / s.step_size()));
  if (s.lr_schedule() == proto::Schedule::COSINE) {
    return base * 0.5 * (1 + std::cos(std::numbers::pi * static_cast<double>(e) / static_cast<double>(total)));
  }
  return base;
}

}  // namespace gnnrt::model
