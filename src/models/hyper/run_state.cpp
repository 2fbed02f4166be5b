#include "models/hyper/run_state.h"

#include <algorithm>
#include <type_traits>

namespace fca {

template <typename T>
template <typename A>
void HyperRunState<T>::layout(A& a, int windows) {
  const int64_t N = int64_t(windows) * max_tokens, D = config.d_model, L = config.n_layer, n = config.streams;
  const int64_t attn = keep_all_layers ? int64_t(windows) * config.n_head * max_tokens * max_tokens : 0;  // backward only
  const int64_t S = config.square();
  const int kept = keep_all_layers ? int(L) : 1;
  blocks.assign(size_t(L), {});
  attention_read.assign(size_t(L), nullptr);
  for (int l = 0; l < kept; ++l) {
    take_block_activations(a, blocks[size_t(l)], N, attn, D, true);
    attention_read[size_t(l)] = a.template take<T>(N * D);
  }
  for (int l = kept; l < L; ++l) blocks[size_t(l)] = blocks[size_t(kept - 1)], attention_read[size_t(l)] = attention_read[size_t(kept - 1)];
  stream_buffers.assign(keep_all_layers ? size_t(2 * L + 1) : 2, nullptr);
  for (auto& s : stream_buffers) s = a.template take<T>(N * n * D);
  coefficients = a.template take<T>(2 * L * N * S * S);
  // hidden[0] = the embedding x_0, hidden[1] = the collapsed streams h (the head's input).
  this->take_stream(a, 1, N, D, int(D / config.n_head), max_tokens, keep_all_layers);
  const bool dhc = config.variant == HyperVariant::dhc, mhc = config.variant == HyperVariant::mhc;
  const int64_t E = config.valid_entries();
  T* ones = a.template take<T>(D);
  T* zeros = a.template take<T>(D);
  if constexpr (std::is_same_v<A, Arena>) {
    std::fill(ones, ones + D, T(1));
    std::fill(zeros, zeros + D, T(0));
  }
  controller.assign(keep_all_layers ? size_t(2 * L) : 1, {});
  for (auto& k : controller) {
    k.normed = a.template take<T>(dhc ? N * n * D : 0);
    k.ln_mean = a.template take<T>(dhc ? N * n : 0);
    k.ln_rstd = a.template take<T>(dhc ? N * n : 0);
    k.z = a.template take<T>(dhc ? N * n * (n + 2) : mhc ? N * E : 0);
    k.rms = a.template take<T>(mhc ? N : 0);
    k.ones = ones;
    k.zeros = zeros;
  }
  const int64_t nb = keep_all_layers ? N : 0;
  d_streams[0] = a.template take<T>(nb * n * D);
  d_streams[1] = a.template take<T>(nb * n * D);
  d_coefficients = a.template take<T>(nb * S * S);
  d_read = a.template take<T>(nb * D);
  d_wide = a.template take<T>(nb * 4 * D);
  d_z = a.template take<T>(dhc ? nb * n * (n + 2) : mhc ? nb * E : 0);
  d_normed = a.template take<T>(dhc ? nb * n * D : 0);
  d_discard = a.template take<T>(2 * D);
}

template <typename T>
HyperRunState<T>::HyperRunState(const HyperConfig& config_, int max_batch_, int max_tokens_, bool keep_all_layers_)
    : config(config_), max_batch(max_batch_), max_tokens(max_tokens_), keep_all_layers(keep_all_layers_) {
  arena = Arena::for_windows(max_batch, [this](auto& a, int windows) { layout(a, windows); });
}

template struct HyperRunState<float>;
template struct HyperRunState<double>;

}  // namespace fca
