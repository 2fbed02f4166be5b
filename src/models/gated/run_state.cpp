#include "models/gated/run_state.h"

#include <omp.h>

#include <algorithm>

namespace fca {

template <typename T>
template <typename A>
void GatedRunState<T>::layout(A& a, int windows) {
  const int64_t N = int64_t(windows) * max_tokens, D = config.d_model, L = config.n_layer;
  const bool featuregate = config.gate == GateKind::featuregate;
  // The controller's logp and backward's probabilities; 0 where neither is kept (a product no buffer
  // takes is not bounded by Arena::for_windows).
  const int64_t attn = featuregate || keep_all_layers ? int64_t(windows) * config.n_head * max_tokens * max_tokens : 0;
  const int kept = keep_all_layers ? int(L) : std::min<int>(int(L), 2);
  blocks.assign(L, {});
  for (int l = 0; l < kept; ++l) take_block_activations(a, blocks[l], N, keep_all_layers ? attn : 0, D, true);
  for (int l = kept; l < L; ++l) blocks[l] = blocks[kept - 1];
  this->take_stream(a, int(L), N, D, int(D / config.n_head), max_tokens, keep_all_layers);  // backward buffers only where backward can run
  gates = a.template take<T>(L * N);
  features = a.template take<T>(featuregate ? L * N * 4 : 0);
  logp[0] = a.template take<T>(featuregate ? attn : 0);
  logp[1] = a.template take<T>(featuregate ? attn : 0);
  head_features = a.template take<T>(featuregate ? int64_t(windows) * config.n_head * max_tokens * 3 : 0);
  const int64_t nb = keep_all_layers ? N : 0;
  d_wide = a.template take<T>(nb * 4 * D);
  d_gate = a.template take<T>(nb);
}

template <typename T>
GatedRunState<T>::GatedRunState(const GatedConfig& config_, int max_batch_, int max_tokens_, bool keep_all_layers_)
    : config(config_), max_batch(max_batch_), max_tokens(max_tokens_), keep_all_layers(keep_all_layers_) {
  arena = Arena::for_windows(max_batch, [this](auto& a, int windows) { layout(a, windows); });
}

template struct GatedRunState<float>;
template struct GatedRunState<double>;

}  // namespace fca
