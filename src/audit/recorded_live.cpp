#include "audit/recorded_live.h"

#include <algorithm>

namespace fca {

RecordedLiveRun::Estimate RecordedLiveRun::estimate(const AuditableModel& model, int windows, int T, int batch, int ranks,
                                                   size_t budget_bytes) {
  Estimate e;
  if (windows <= 0 || batch <= 0 || ranks <= 0) return e;
  if (model.last_logits() == nullptr) {  // digests: a few bytes a batch
    e.windows = windows;
    return e;
  }
  const int64_t batches = (windows + batch - 1) / batch, per_rank = (batches + ranks - 1) / ranks;
  const size_t batch_bytes = size_t(batch) * size_t(T) * size_t(model.vocab()) * sizeof(float);
  const int64_t kept_per_rank = std::min<int64_t>(per_rank, int64_t(budget_bytes / batch_bytes));
  e.windows = std::min<int64_t>(windows, kept_per_rank * ranks * batch);
  e.bytes_per_rank = size_t(kept_per_rank) * batch_bytes;
  return e;
}

void RecordedLiveRun::keep(const AuditableModel& model, int w0, int B, int T, const double* nll) {
  Batch b;
  b.windows = B;
  b.nll.assign(nll, nll + B);
  if (const float* logits = model.last_logits()) {
    const size_t n = size_t(B) * size_t(T) * size_t(model.vocab());
    if (kept_bytes_ + n * sizeof(float) > budget_bytes_) return;
    b.logits.assign(logits, logits + n);
    kept_bytes_ += n * sizeof(float);
  } else {
    b.logits_sha256 = model.last_logits_sha256();
  }
  batches_[w0] = std::move(b);
}

void RecordedLiveRun::release() {
  batches_.clear();
  kept_bytes_ = 0;
}

const RecordedLiveRun::Batch* RecordedLiveRun::find(int w0, int B) const {
  const auto it = batches_.find(w0);
  return it != batches_.end() && it->second.windows == B ? &it->second : nullptr;
}

}  // namespace fca
