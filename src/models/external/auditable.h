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

class ExternalAuditable : public AuditableModel {
 public:
  // Starts `command` and asks it to describe its model; timeout_s bounds every answer.
  ExternalAuditable(const std::string& command, double timeout_s);

  std::string family() const override { return "external"; }
  std::string description() const override { return description_; }
  std::string content_hash() const override { return model_sha256_; }
  std::string config_json() const override { return config_json_; }
  size_t parameter_count() const override { return parameter_count_; }
  int max_tokens() const override { return max_tokens_; }
  int vocab() const override { return vocab_; }
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
  bool has_identity_profile() const override { return !identity_.empty(); }
  std::string controller_evaluations_counted_by() const override { return "the adapter (reported in its answers)"; }
  void identity_profile(CoefficientTensor& out) const override;
  void structure_removed_profile(const CoefficientTensor& static_profile, CoefficientTensor& out) const override;
  std::string static_profile_name() const override { return static_profile_; }
  std::string structure_removed_name() const override { return structure_removed_; }

  // What the adapter said of itself (family label, tokenizer, protocol), for the provenance.
  const std::string& adapter_family() const { return adapter_family_; }
  const std::string& command() const { return connection_->command(); }
  const AdapterConnection& connection() const { return *connection_; }
  // For requests beyond the audit's (fca exec's exec_prepare, exec_pass, exec_time).
  AdapterConnection& connection() { return *connection_; }

 private:
  // Reads the per-window NLL [B] and the logits digest of a run answer.
  void read_run_answer(const SafetensorsReader& answer, int B, double* window_nll);
  std::unique_ptr<AdapterConnection> connection_;
  std::string adapter_family_, description_, model_sha256_, config_json_, tokenizer_;
  std::string static_profile_, structure_removed_;
  size_t parameter_count_ = 0;
  int max_tokens_ = 0, vocab_ = 0;
  CoefficientShape shape_;  // tokens = max_tokens_
  std::vector<uint8_t> mask_;      // [L, S, K]
  std::vector<float> identity_;    // [L, S, K], continuous records only
  std::string last_digest_;
  int64_t replay_evaluations_ = 0;
  int64_t live_evaluations_ = 0;  // as the adapter reports them (its replay count too: fca cannot count inside it)
};

}  // namespace fca
