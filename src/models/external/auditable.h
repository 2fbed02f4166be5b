// A model fca does not implement, audited through an adapter process that speaks fca-external-v1
// (models/external/protocol.h, docs/external-protocol.md). fca owns the windows, the cache, the
// conditions and the statistics; the adapter runs windows live (recording its coefficients) and
// replays handed coefficients. Its logits stay in the adapter: exact replay is checked from the
// SHA-256 of the logits bytes and the per-window NLLs, bitwise.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/auditable.h"
#include "models/external/protocol.h"

namespace fca {

// The checks of each answer the audit reads, as plain functions of the received answer (the
// connection only carries the bytes; fuzz/fuzz_adapter_protocol.cpp feeds them arbitrary ones).
// Errors name the answer, the field or tensor, expected vs found.

// The most coefficients a window's record may hold, L x max_tokens x S x K (4 GiB of float32).
inline constexpr int64_t kMaxExternalWindowCoefficients = int64_t(1) << 30;

// describe's answer: every field in range, the record's shape, the mask and the optional identity.
struct ExternalDescription {
  std::string family;       // the adapter's own label
  std::string name;         // what audit.json, exec.json and the console call the model (HookedAdapter: the class)
  std::string description;  // the adapter's line, then " [external: <family>]"
  std::string model_sha256, config_json, tokenizer, static_profile, structure_removed;
  size_t parameter_count = 0;
  int max_tokens = 0, vocab = 0;
  CoefficientShape shape;        // tokens = max_tokens
  std::vector<uint8_t> mask;     // [L, S, K]
  std::vector<float> identity;   // [L, S, K], continuous records only; empty when not given
  // [L]: the dtype each layer's handed coefficients are cast to before the model uses them (F32,
  // F64, BF16 or F16); a replay's digest is of what the model used, so fca rounds what it sent the same way.
  std::vector<DType> coefficient_dtypes;
};
ExternalDescription parse_describe(const SafetensorsReader& answer);

// tokenize's answer for `split`: the ids, each in [0, vocab).
std::vector<int32_t> parse_tokenize(const SafetensorsReader& answer, const std::string& split, int vocab);

// What a run answer says besides its NLLs: the digest of the logits that run wrote and the
// controller evaluations the adapter counted.
struct RunAnswer {
  std::string logits_sha256;
  int64_t controller_evaluations = 0;
};

// run_live's answer to a batch of B windows of T tokens of a model of record `shape`: the NLL [B]
// into window_nll; one controller evaluation per layer; the coefficients (finite) and, for routing
// records, the discrete field into windows record_first .. record_first + B - 1 of `record` (none
// when null).
RunAnswer parse_run_live(const SafetensorsReader& answer, const CoefficientShape& shape, int B, int T, double* window_nll,
                         CoefficientTensor* record, int record_first);

// The digest a replay of the first B windows of `sent` must report: the valid coordinates' values
// in [B, L, T, S, K] order, each rounded to its layer's dtype (coefficient_dtypes [L]) and hashed
// as little-endian float32, then for routing records the discrete field [B, L, T, slots] as int32.
std::string replayed_coefficients_sha256(const CoefficientTensor& sent, int B, const std::vector<DType>& coefficient_dtypes);

// run_replay's answer to the first B windows of `sent`: the NLL [B] into window_nll; the SHA-256 of
// the coefficients the adapter's model used must be replayed_coefficients_sha256 of those sent.
RunAnswer parse_run_replay(const SafetensorsReader& answer, const CoefficientTensor& sent, int B, double* window_nll,
                           const std::vector<DType>& coefficient_dtypes);

class ExternalAuditable : public AuditableModel {
 public:
  // Starts `command` and asks it to describe its model; timeout_s bounds every answer.
  ExternalAuditable(const std::string& command, double timeout_s);

  std::string family() const override { return "external"; }
  std::string description() const override { return model_.description; }
  std::string content_hash() const override { return model_.model_sha256; }
  std::string config_json() const override { return model_.config_json; }
  size_t parameter_count() const override { return model_.parameter_count; }
  int max_tokens() const override { return model_.max_tokens; }
  int vocab() const override { return model_.vocab; }
  std::vector<int32_t> tokenize(const std::string& split, std::span<const unsigned char> text) const override;
  CoefficientTensor make_coefficients(int windows, int tokens) const override;
  void run_live(const int32_t* inputs, const int32_t* targets, int B, int T, CoefficientTensor* record, int record_first,
                double* window_nll) override;
  void run_replay(const int32_t* inputs, const int32_t* targets, int B, int T, const CoefficientTensor& coefficients,
                  double* window_nll) override;
  size_t run_state_bytes() const override { return 0; }  // the activations live in the adapter
  int max_batch() const override { return 1 << 20; }    // the adapter takes any batch
  const float* last_logits() const override { return nullptr; }
  // The logits stay in the adapter; each answer carries the digest of the logits that run wrote.
  void poison_logits(int, int) override {}
  std::string last_logits_sha256() const override { return last_digest_; }
  int64_t replay_controller_evaluations() const override { return replay_evaluations_; }
  bool has_identity_profile() const override { return !model_.identity.empty(); }
  std::string controller_evaluations_counted_by() const override { return "the adapter (reported in its answers)"; }
  void identity_profile(CoefficientTensor& out) const override;
  void structure_removed_profile(const CoefficientTensor& static_profile, CoefficientTensor& out) const override;
  std::string static_profile_name() const override { return model_.static_profile; }
  std::string structure_removed_name() const override { return model_.structure_removed; }

  // What the adapter said of itself (family label, tokenizer, protocol), for the provenance.
  const std::string& adapter_family() const { return model_.family; }
  // How audit.json, exec.json and the console name this model: "external: <the adapter's name>"
  // (the command, often a relay such as `cat <&5 & exec cat >&4`, goes into the provenance).
  std::string model_path() const { return "external: " + model_.name; }
  const std::string& command() const { return connection_->command(); }
  const AdapterConnection& connection() const { return *connection_; }
  // For requests beyond the audit's (fca exec's exec_prepare, exec_pass, exec_time).
  AdapterConnection& connection() { return *connection_; }

 private:
  std::unique_ptr<AdapterConnection> connection_;
  ExternalDescription model_;
  std::string last_digest_;
  int64_t replay_evaluations_ = 0;
};

}  // namespace fca
