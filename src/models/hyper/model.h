// The hyper-connection model's parameters: the dense pre-norm blocks of the gated family plus the
// per-site coefficient parameters, in the parameter store of every single-file family (FlatModel).
// Read-only during inference; one model serves many run states.
#pragma once
#include <string>
#include <vector>

#include "models/base/block.h"
#include "models/flat_model.h"
#include "models/hyper/config.h"
#include "models/parameters.h"

namespace fca {

// One site's coefficient parameters (docs/hyper.md).
template <typename T>
struct HyperSiteWeights {
  T* static_part;          // [n+1, n+1]: shc/dhc the coefficients' static part, mhc the logits b ([0,0] = 0)
  T* dyn_weight = nullptr;  // dhc [n+2, D]; mhc [n^2+2n, nD] (rows in entry order e)
  T* dyn_scale = nullptr;   // dhc [2] (s_alpha, s_beta); mhc [3] (alpha read, write, mix)
};

template <typename T>
struct HyperWeights {
  T* wte;  // [256, D], also the tied output head
  T* wpe;  // [T, D]
  std::vector<BlockWeights<T>> blocks;
  T *ln_f_weight, *ln_f_bias;  // [D]
  std::vector<HyperSiteWeights<T>> sites;  // 2L
};

struct HyperSpec {
  using Config = HyperConfig;
  template <typename T>
  using Weights = HyperWeights<T>;
  static constexpr const char* kFormat = kHyperFormat;
  static std::vector<TensorSlot> layout(const HyperConfig& c) { return hyper_tensor_layout(c); }
  template <typename T>
  static HyperWeights<T> bind(ParameterBuffer<T>& params, const HyperConfig& c);
  // The static parts and scales of docs/hyper.md (the dynamic weights stay 0): shc/dhc read
  // one-hot at r(p), writes 1, mixing I; mhc logits +-hc_pre_logit, writes 0, mixing diagonal 0 and
  // off-diagonal hc_res_offdiag_init; scales hc_scale_init.
  template <typename T>
  static void finish_initialization(HyperWeights<T>& w, const HyperConfig& c);
  // "dhc model with 4 layers and 4 streams": how load errors name a model.
  static std::string describe(const HyperConfig& c);
};

// The hyper model: initialised (the gated family's block initialisation from one seed, then the hc
// parameters), loaded from an fca-hyper-v1 file (format, config, every tensor's name, shape and
// dtype checked, and every static square's [0, 0] entry 0: check_hyper_model) and saved by FlatModel.
template <typename T>
using HyperModel = FlatModel<T, HyperSpec>;

// Throws Error naming `where` and the site when a static square's masked entry [0, 0] is not 0.
template <typename T>
void check_hyper_model(const HyperModel<T>& model, const std::string& where);

// Loads and checks a checkpoint (HyperModel::load, then check_hyper_model).
HyperModel<float> load_hyper_model(const std::string& path);

}  // namespace fca
