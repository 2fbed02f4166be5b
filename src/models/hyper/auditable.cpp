#include "models/hyper/auditable.h"

#include <algorithm>

#include "core/error.h"
#include "core/sha256.h"
#include "models/hyper/diagnostics.h"

namespace fca {

HyperAuditable::HyperAuditable(const std::string& path, int max_batch, int max_tokens)
    : FamilyAuditable(load_hyper_model(path), max_batch, max_tokens), hash_(sha256_file(path)) {}

std::string HyperAuditable::description() const {
  const HyperConfig& c = model_.config();
  return std::string(hyper_variant_name(c.variant)) + " n " + std::to_string(c.streams) + " L " + std::to_string(c.n_layer) +
         ", D " + std::to_string(c.d_model) + ", H " + std::to_string(c.n_head) + ", T " + std::to_string(c.seq_len);
}

std::vector<TraceTensor> HyperAuditable::trace_tensors(int B, int T, bool) const {
  if (!rs_->keep_all_layers) throw Error("hyper trace: the run state keeps two stream buffers; set_keep_intermediates(true) first");
  const HyperConfig& c = model_.config();
  const int64_t D = c.d_model, n = c.streams;
  std::vector<TraceTensor> out;
  for (int p = 0; p <= c.sites(); ++p) out.push_back({"hc.streams." + std::to_string(p), {B, T, n, D}, rs_->streams(p)});
  for (int p = 0; p < c.sites(); ++p) {
    const float* read = p % 2 == 0 ? rs_->attention_read[size_t(p / 2)] : rs_->blocks[size_t(p / 2)].ln2_in;
    out.push_back({"hc.read." + std::to_string(p), {B, T, D}, read});
  }
  out.push_back({"hidden.1", {B, T, D}, rs_->hidden[1]});
  return out;
}

void HyperAuditable::identity_profile(CoefficientTensor& out) const { fill_hyper_identity(model_.config(), out, 0); }

void HyperAuditable::structure_removed_profile(const CoefficientTensor& static_profile, CoefficientTensor& out) const {
  // Groups: read (row 0) 0, mixing (rows >= 1, columns >= 1) 1, writes (column 0) kept.
  source_group_uniform_mean(static_profile, [](int, int s, int k) { return s == 0 ? 0 : k == 0 ? -1 : 1; }, out);
}

int HyperAuditable::disable_group_of(int, int s, int k) const {
  if (s == 0) return k == 0 ? -1 : 0;  // (0, 0) is masked
  return k == 0 ? 1 : 2;
}

void HyperAuditable::disabled_profile(CoefficientTensor& values) const {
  const HyperConfig& c = model_.config();
  const int n = c.streams, S = c.square();
  const CoefficientShape& shape = values.shape();
  for (int p = 0; p < shape.layers; ++p)
    for (int t = 0; t < shape.tokens; ++t)
      for (int s = 0; s < S; ++s)
        for (int k = 0; k < S; ++k) {
          float v = 0;
          if (s == 0 && k > 0) v = 1.0f / float(n);   // read: the mean of the streams
          else if (s > 0 && k == 0) v = 1.0f;         // write: the branch output into every stream
          else if (s > 0) v = s == k ? 1.0f : 0.0f;   // mixing: I
          values.at(0, p, t, s, k) = v;
        }
}

std::vector<std::string> HyperAuditable::stream_labels() const {
  std::vector<std::string> labels{"read"};
  for (int i = 1; i <= model_.config().streams; ++i) labels.push_back("stream " + std::to_string(i));
  return labels;
}

std::vector<std::string> HyperAuditable::source_labels() const {
  std::vector<std::string> labels{"branch output"};
  for (int i = 1; i <= model_.config().streams; ++i) labels.push_back("stream " + std::to_string(i));
  return labels;
}

std::string HyperAuditable::coefficient_constraint() const {
  return model_.config().variant == HyperVariant::mhc ? "doubly stochastic mixing: max |column sum - 1| of the n x n mixing block" : "";
}

double HyperAuditable::constraint_violation(const CoefficientView& coefficients, int window) const {
  return hyper_column_sum_deviation(model_.config(), coefficients, window);
}

nlohmann::ordered_json HyperAuditable::cache_diagnostics(const CoefficientView& evaluation) const {
  return hyper_cache_diagnostics(model_.config(), evaluation);
}

ModelFamily hyper_model_family() {
  return {"hyper", kHyperFormat,
          [](const std::string&, const std::string& format) { return format == kHyperFormat; },
          [](const std::string& path, int batch, int tokens) -> std::unique_ptr<AuditableModel> {
            return std::make_unique<HyperAuditable>(path, batch, tokens);
          },
          [](const nlohmann::json& c) {
            return c.at("hc_variant").get<std::string>() + " n" + std::to_string(c.at("hc_streams").get<int>());
          },
          nullptr, nullptr};
}

}  // namespace fca
