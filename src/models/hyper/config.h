// The hyper-connection family (docs/hyper.md, format fca-hyper-v1): the
// gated family's pre-norm blocks without gates, with n residual streams mixed at two sites per
// block (attention p = 2l, MLP p = 2l + 1) by a per-token (n+1) x (n+1) coefficient square:
// static (shc), dynamic with tanh (dhc), or manifold-constrained with Sinkhorn (mhc).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/base/stream.h"  // kByteVocab
#include "models/base/tensor_slot.h"

namespace fca {

inline constexpr const char* kHyperFormat = "fca-hyper-v1";

enum class HyperVariant { shc, dhc, mhc };
const char* hyper_variant_name(HyperVariant v);
// Throws Error listing the variants when `name` is none of them.
HyperVariant parse_hyper_variant(const std::string& name);

struct HyperConfig {
  int n_layer = 4;    // L (2L sites)
  int d_model = 128;  // D
  int n_head = 4;     // H, D % H == 0
  int seq_len = 128;  // T, positions (rows of wpe)
  HyperVariant variant = HyperVariant::dhc;
  int streams = 4;                 // hc_streams n >= 1
  bool tanh = true;                // hc_tanh (dhc)
  double scale_init = 0.01;        // hc_scale_init: s_alpha, s_beta (dhc); alpha_read/write/mix (mhc)
  int sinkhorn_iters = 20;         // hc_sinkhorn_iters (mhc) >= 1
  double eps = 1e-6;               // hc_eps: Sinkhorn and read eps (mhc)
  double norm_eps = 1e-6;          // hc_norm_eps: the RMS eps (mhc)
  double pre_logit = 1.0;          // hc_pre_logit: +- read logit of b_pre (mhc)
  double res_offdiag_init = -8.0;  // hc_res_offdiag_init: off-diagonal b_res (mhc)
  // hc_out_init_div_sqrt_n: [HC]'s output-module init, the attention and MLP output projections'
  // initial values divided by sqrt(n) (the paper's "scale by sqrt(n)", read as dividing: docs/hyper.md).
  // Off by default: with it off, step-0 HC equals step-0 Dense of the same seed.
  bool out_init_div_sqrt_n = false;

  int head_dim() const { return d_model / n_head; }
  int sites() const { return 2 * n_layer; }
  int square() const { return streams + 1; }          // rows and columns of C (S = K = n + 1)
  int valid_entries() const { return streams * streams + 2 * streams; }  // n^2 + 2n
  int read_stream(int site) const { return site % streams; }            // r(p)
  // Throws Error naming the offending field; `where` prefixes the message (a file or "flags").
  void validate(const std::string& where) const;
  std::string to_json() const;
  static HyperConfig from_json(const std::string& text, const std::string& where);
  bool operator==(const HyperConfig&) const = default;
};

// The valid-entry index e(s, k) of docs/hyper.md: row-major with (0, 0) skipped.
inline int hyper_entry(int n, int s, int k) { return s == 0 ? k - 1 : n + (s - 1) * (n + 1) + k; }

// Every parameter, in a fixed order: the gated family's dense layout (wte, wpe, blocks, ln_f),
// then per site hc.{p}.static [n+1, n+1] and, for dhc and mhc, hc.{p}.dyn.weight and
// hc.{p}.dyn.scale. The static and scale tensors are not decayed (docs/hyper.md).
std::vector<TensorSlot> hyper_tensor_layout(const HyperConfig& config);

}  // namespace fca
