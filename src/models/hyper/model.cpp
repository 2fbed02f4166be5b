#include "models/hyper/model.h"

#include <cmath>

#include "core/error.h"

namespace fca {

template <typename T>
HyperWeights<T> HyperSpec::bind(ParameterBuffer<T>& params, const HyperConfig& c) {
  HyperWeights<T> w;
  bind_byte_trunk(w, [&](const std::string& name) { return params.at(name); });
  for (int l = 0; l < c.n_layer; ++l) w.blocks.push_back(params.block(block_prefix(l)));
  for (int p = 0; p < c.sites(); ++p) {
    const std::string h = "hc." + std::to_string(p) + ".";
    w.sites.push_back({params.at(h + "static"), params.find(h + "dyn.weight"), params.find(h + "dyn.scale")});
  }
  return w;
}

template <typename T>
void HyperSpec::finish_initialization(HyperWeights<T>& w, const HyperConfig& c) {
  const int n = c.streams, S = c.square();
  for (int p = 0; p < c.sites(); ++p) {
    T* st = w.sites[size_t(p)].static_part;  // zero on entry
    const int r = c.read_stream(p);
    if (c.variant == HyperVariant::mhc) {
      for (int i = 0; i < n; ++i) st[1 + i] = T(i == r ? c.pre_logit : -c.pre_logit);  // read logits
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < n; ++i) st[(1 + j) * S + 1 + i] = T(i == j ? 0.0 : c.res_offdiag_init);
      // write logits 0: H^post = 2 sigma(0) = 1
    } else {
      st[1 + r] = T(1);
      for (int j = 0; j < n; ++j) {
        st[(1 + j) * S] = T(1);
        st[(1 + j) * S + 1 + j] = T(1);
      }
    }
    if (T* scale = w.sites[size_t(p)].dyn_scale) {
      const int count = c.variant == HyperVariant::mhc ? 3 : 2;
      for (int k = 0; k < count; ++k) scale[k] = T(c.scale_init);
    }
  }
  if (c.out_init_div_sqrt_n) {
    // The output modules' initial values / sqrt(n), after the draw: the block weights stay those of
    // the dense model of the same seed, scaled.
    const int64_t D = c.d_model;
    const T inv_sqrt_n = T(1) / std::sqrt(T(n));
    for (const BlockWeights<T>& b : w.blocks) {
      for (int64_t i = 0; i < D * D; ++i) b.proj_weight[i] *= inv_sqrt_n;
      for (int64_t i = 0; i < D * 4 * D; ++i) b.mlp_proj_weight[i] *= inv_sqrt_n;
    }
  }
}

std::string HyperSpec::describe(const HyperConfig& c) {
  return std::string(hyper_variant_name(c.variant)) + " model with " + std::to_string(c.n_layer) + " layers and " +
         std::to_string(c.streams) + " streams";
}

template <typename T>
void check_hyper_model(const HyperModel<T>& model, const std::string& where) {
  for (int p = 0; p < model.config().sites(); ++p)
    if (model.weights().sites[size_t(p)].static_part[0] != T(0))
      throw Error(where + ": tensor 'hc." + std::to_string(p) + ".static' has " +
                  std::to_string(double(model.weights().sites[size_t(p)].static_part[0])) +
                  " at [0, 0], expected 0 (the masked entry: the branch input never reads its own output)");
}

HyperModel<float> load_hyper_model(const std::string& path) {
  HyperModel<float> m = HyperModel<float>::load(path);
  check_hyper_model(m, path);
  return m;
}

#define FCA_INSTANTIATE(T)                                                                      \
  template HyperWeights<T> HyperSpec::bind<T>(ParameterBuffer<T>&, const HyperConfig&);        \
  template void HyperSpec::finish_initialization<T>(HyperWeights<T>&, const HyperConfig&);     \
  template void check_hyper_model<T>(const HyperModel<T>&, const std::string&);
FCA_INSTANTIATE(float)
FCA_INSTANTIATE(double)
#undef FCA_INSTANTIATE

}  // namespace fca
