#include "models/gated/run_state.h"

#include <omp.h>

#include <algorithm>

namespace fca {

template <typename T>
template <typename A>
void GatedRunState<T>::layout(A& a) {
  const int64_t N = int64_t(max_batch) * max_tokens, D = config.d_model, L = config.n_layer;
  const int64_t attn = int64_t(max_batch) * config.n_head * max_tokens * max_tokens;  // the controller's logp
  const bool featuregate = config.gate == GateKind::featuregate;
  const int kept = keep_all_layers ? int(L) : std::min<int>(int(L), 2);
  blocks.assign(L, {});
  for (int l = 0; l < kept; ++l) take_block_activations(a, blocks[l], N, keep_all_layers ? attn : 0, D, true);
  for (int l = kept; l < L; ++l) blocks[l] = blocks[kept - 1];
  this->take_stream(a, int(L), N, D, int(D / config.n_head), max_tokens, keep_all_layers);  // backward buffers only where backward can run
  gates = a.template take<T>(L * N);
  features = a.template take<T>(featuregate ? L * N * 4 : 0);
  logp[0] = a.template take<T>(featuregate ? attn : 0);
  logp[1] = a.template take<T>(featuregate ? attn : 0);
  head_features = a.template take<T>(featuregate ? int64_t(max_batch) * config.n_head * max_tokens * 3 : 0);
  const int64_t nb = keep_all_layers ? N : 0;
  d_wide = a.template take<T>(nb * 4 * D);
  d_gate = a.template take<T>(nb);
}

template <typename T>
GatedRunState<T>::GatedRunState(const GatedConfig& config_, int max_batch_, int max_tokens_, bool keep_all_layers_)
    : config(config_), max_batch(max_batch_), max_tokens(max_tokens_), keep_all_layers(keep_all_layers_) {
  ArenaMeasure measure;
  layout(measure);
  arena = Arena(measure.bytes());
  layout(arena);
}

template struct GatedRunState<float>;
template struct GatedRunState<double>;

}  // namespace fca
