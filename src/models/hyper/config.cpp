#include "models/hyper/config.h"

#include <cmath>

#include "core/error.h"
#include "core/parse.h"
#include "core/json.h"
#include "models/parameters.h"

namespace fca {

const char* hyper_variant_name(HyperVariant v) {
  switch (v) {
    case HyperVariant::shc: return "shc";
    case HyperVariant::dhc: return "dhc";
    case HyperVariant::mhc: return "mhc";
  }
  return "?";
}

HyperVariant parse_hyper_variant(const std::string& name) {
  for (HyperVariant v : {HyperVariant::shc, HyperVariant::dhc, HyperVariant::mhc})
    if (name == hyper_variant_name(v)) return v;
  throw Error("unknown hc_variant '" + name + "' (expected one of shc, dhc, mhc)");
}

void HyperConfig::validate(const std::string& where) const {
  check_transformer_shape(n_layer, d_model, n_head, seq_len, where);
  if (d_model % n_head != 0)
    throw Error(where + ": d_model " + std::to_string(d_model) + " is not divisible by n_head " + std::to_string(n_head));
  // 64 streams bound the coefficient square (65 x 65 per site and token) and mHC's projection.
  if (streams < 1 || streams > 64) throw Error(where + ": hc_streams must be in 1 .. 64, found " + std::to_string(streams));
  if (sinkhorn_iters < 1 || sinkhorn_iters > 1000)
    throw Error(where + ": hc_sinkhorn_iters must be in 1 .. 1000, found " + std::to_string(sinkhorn_iters));
  auto finite = [&](double v, const char* field) {
    if (!std::isfinite(v)) throw Error(where + ": " + field + " must be a finite number, found " + number_text(v));
  };
  finite(scale_init, "hc_scale_init");
  finite(pre_logit, "hc_pre_logit");
  finite(res_offdiag_init, "hc_res_offdiag_init");
  if (!(eps > 0 && eps < 1)) throw Error(where + ": hc_eps must be in (0, 1), found " + number_text(eps));
  if (!(norm_eps > 0 && norm_eps < 1)) throw Error(where + ": hc_norm_eps must be in (0, 1), found " + number_text(norm_eps));
}

std::string HyperConfig::to_json() const {
  nlohmann::ordered_json j;
  j["n_layer"] = n_layer;
  j["d_model"] = d_model;
  j["n_head"] = n_head;
  j["seq_len"] = seq_len;
  j["hc_variant"] = hyper_variant_name(variant);
  j["hc_streams"] = streams;
  j["hc_tanh"] = tanh;
  j["hc_scale_init"] = scale_init;
  j["hc_sinkhorn_iters"] = sinkhorn_iters;
  j["hc_eps"] = eps;
  j["hc_norm_eps"] = norm_eps;
  j["hc_pre_logit"] = pre_logit;
  j["hc_res_offdiag_init"] = res_offdiag_init;
  j["hc_out_init_div_sqrt_n"] = out_init_div_sqrt_n;
  return j.dump();
}

HyperConfig HyperConfig::from_json(const std::string& text, const std::string& where) {
  // Every field is written by to_json and required when read: a checkpoint never depends on a
  // default that a later version might change.
  const StrictConfig j(text, where,
                       {"n_layer", "d_model", "n_head", "seq_len", "hc_variant", "hc_streams", "hc_tanh", "hc_scale_init",
                        "hc_sinkhorn_iters", "hc_eps", "hc_norm_eps", "hc_pre_logit", "hc_res_offdiag_init",
                        "hc_out_init_div_sqrt_n"},
                       kHyperFormat);
  HyperConfig c;
  c.n_layer = j.integer("n_layer");
  c.d_model = j.integer("d_model");
  c.n_head = j.integer("n_head");
  c.seq_len = j.integer("seq_len");
  try {
    c.variant = parse_hyper_variant(j.text("hc_variant"));
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  c.streams = j.integer("hc_streams");
  c.tanh = j.flag("hc_tanh");
  c.scale_init = j.number("hc_scale_init");
  c.sinkhorn_iters = j.integer("hc_sinkhorn_iters");
  c.eps = j.number("hc_eps");
  c.norm_eps = j.number("hc_norm_eps");
  c.pre_logit = j.number("hc_pre_logit");
  c.res_offdiag_init = j.number("hc_res_offdiag_init");
  // The one field a checkpoint may lack: those written before it existed were all initialised
  // without the rescale, so false is what they are, not a default that could change.
  c.out_init_div_sqrt_n = j.has("hc_out_init_div_sqrt_n") ? j.flag("hc_out_init_div_sqrt_n") : false;
  c.validate(where);
  return c;
}

std::vector<TensorSlot> hyper_tensor_layout(const HyperConfig& c) {
  LayoutBuilder layout;  // rank-2 tensors decayed unless said otherwise
  const int64_t D = c.d_model, n = c.streams, S = c.square();
  // The dense layout first, in the gated family's order, so that a hyper model drawn from a seed
  // has the block weights of the dense model drawn from it (the hc tensors draw nothing).
  layout.add_byte_trunk(c.n_layer, D, c.seq_len, [&](LayoutBuilder& block, const std::string& p, int) { block.add_dense_block(p, D); });
  for (int p = 0; p < c.sites(); ++p) {
    const std::string h = "hc." + std::to_string(p) + ".";
    layout.add(h + "static", {S, S}, false);
    if (c.variant == HyperVariant::dhc) {
      layout.add(h + "dyn.weight", {n + 2, D}, true);
      layout.add(h + "dyn.scale", {2}, false);
    } else if (c.variant == HyperVariant::mhc) {
      layout.add(h + "dyn.weight", {n * n + 2 * n, n * D}, true);
      layout.add(h + "dyn.scale", {3}, false);
    }
  }
  return layout.slots;
}

}  // namespace fca
