#include "exec/exec_options.h"

namespace fca {

TokenWindows load_token_windows(const TextSplit& split, int T, int wanted) {
  TokenWindows w;
  const auto idx = evenly_spaced_windows(split.window_count(T), wanted, split.name());
  w.count = int(idx.size());
  w.inputs.resize(idx.size() * size_t(T));
  w.targets.resize(idx.size() * size_t(T));
  for (size_t i = 0; i < idx.size(); ++i) split.window(idx[i], T, w.inputs.data() + i * T, w.targets.data() + i * T);
  return w;
}

}  // namespace fca
