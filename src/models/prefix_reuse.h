// Reusing the start of a forward pass across the audit's replays. The audit replays the same
// windows under many conditions, and what a pass computes before it applies its first coefficient
// (the embedding and block 0, which reads only the embedding) depends on the tokens alone. A run
// state that still holds that prefix from its last pass over the same windows can start after it.
// The kernels are deterministic for a given batch shape and thread count, so the result is bitwise
// the one a full pass gives (tests/audit_test.cpp compares whole audits with and without).
#pragma once
#include <algorithm>
#include <cstdint>

namespace fca {

struct PrefixReuse {
  // Set by the audit for its condition replays only: live passes (the controller reads block 0's
  // attention), `fca exec` (it measures what a pass costs) and training never reuse.
  bool enabled = false;
  int64_t reused_passes = 0;  // passes that started after a kept prefix, for the audit's report

  // Whether a pass over tokens [B x T] may start after the prefix kept with `kept_tokens` (the
  // run state's copy of its last pass's inputs). Call before the pass overwrites anything.
  bool reusable(const int32_t* tokens, int B, int T, const int32_t* kept_tokens) const {
    return enabled && valid_ && B == batch_ && T == tokens_ && std::equal(tokens, tokens + int64_t(B) * T, kept_tokens);
  }
  // A pass is about to overwrite the prefix (or not compute it): it is no longer held.
  void invalidate() { valid_ = false; }
  // The pass just computed the prefix of its B x T tokens.
  void computed(int B, int T) {
    valid_ = true;
    batch_ = B;
    tokens_ = T;
  }

 private:
  bool valid_ = false;
  int batch_ = 0, tokens_ = 0;
};

}  // namespace fca
