#include "audit/recorded_live.h"

namespace fca {

bool RecordedLiveRun::keeps_all(const AuditableModel& model, int windows, int T, size_t budget_bytes) {
  if (model.last_logits() == nullptr) return true;  // digests: 64 bytes a batch
  return double(windows) * T * model.vocab() * sizeof(float) <= double(budget_bytes);
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

const RecordedLiveRun::Batch* RecordedLiveRun::find(int w0, int B) const {
  const auto it = batches_.find(w0);
  return it != batches_.end() && it->second.windows == B ? &it->second : nullptr;
}

}  // namespace fca
