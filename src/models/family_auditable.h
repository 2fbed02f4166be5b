// The part of the audit interface that every model family implements the same way: run windows
// with a live source (recording when asked) or a replayed one, give back the logits and the
// replayed sources' controller evaluations. A family supplies Traits:
//   Model, RunState, Live, Recording, Replayed (its coefficient or routing sources);
//   run_state(model, max_batch, max_tokens); replayed(model, coefficients) -> Replayed;
//   forward(model, rs, tokens, B, T, source, first_window); loss(rs, targets, window_nll).
// and the rest of AuditableModel (names, tokenizer, coefficient shape, profiles) in its subclass.
// Every family's auditable is Traceable (models/capabilities.h): by default it shows no
// intermediates and keeps no per-position losses; a family overrides what it has.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>

#include "core/error.h"
#include "core/sha256.h"
#include "models/auditable.h"
#include "models/base/stream.h"
#include "models/capabilities.h"
#include "models/parameters.h"
#include "ops/gemm.h"

namespace fca {

// Declares the model's rank-2 tensors, and each [out, in] slice of its rank-3 tensors (the MoE's
// experts, [E, out, in]), in `packed`, each then packed for the GEMM's transposed-B
// form (ops/gemm.h, and rounded to bf16 in that precision) the first time a pass uses it as a
// Linear weight: the weights never change after loading, and every pass of an audit would
// otherwise pack each Linear weight again. Only while all of them fit 256 MiB: a large model's
// weights are read from memory once per pass either way, and a second copy of them would cost more
// memory than packing costs time. Audits install it around every pass, and so does `fca bench
// forward`, which times what an audit's passes run.
template <typename Model>
void declare_packable_weights(PackedWeights& packed, const Model& model) {
  constexpr size_t kPackedWeightsBudget = size_t(256) << 20;
  size_t bytes = 0;
  for (const TensorSlot& t : model.layout())
    if (t.shape.size() == 2 || t.shape.size() == 3) bytes += t.numel * sizeof(float);
  if (bytes > kPackedWeightsBudget) return;
  for (size_t i = 0; i < model.layout().size(); ++i) {
    const TensorSlot& t = model.layout()[i];
    if (t.shape.size() == 2) packed.add(model.slot(i), int(t.shape[0]), int(t.shape[1]));
    if (t.shape.size() == 3)
      for (int64_t g = 0; g < t.shape[0]; ++g)
        packed.add(model.slot(i) + g * t.shape[1] * t.shape[2], int(t.shape[1]), int(t.shape[2]));
  }
}

template <typename Traits>
class FamilyAuditable : public AuditableModel, public Traceable {
 public:
  using Model = typename Traits::Model;

  void run_live(const int32_t* inputs, const int32_t* targets, int B, int T, CoefficientTensor* record, int record_first,
                double* window_nll) override {
    const PackedWeightsScope packed(&packed_);
    if (record != nullptr) {
      check_record_shape(*record, T, "recording sink");
      typename Traits::Recording source(model_, *record);
      Traits::forward(model_, *rs_, inputs, B, T, source, record_first);
    } else {
      typename Traits::Live source(model_);
      Traits::forward(model_, *rs_, inputs, B, T, source, 0);
    }
    Traits::loss(*rs_, targets, window_nll);
  }
  void run_replay(const int32_t* inputs, const int32_t* targets, int B, int T, const CoefficientTensor& coefficients,
                  double* window_nll) override {
    const PackedWeightsScope packed(&packed_);
    check_record_shape(coefficients, T, "replayed coefficients");
    typename Traits::Replayed source = Traits::replayed(model_, coefficients);
    const int64_t before = rs_->controller_evaluations;  // counted by the controller code, not the source
    Traits::forward(model_, *rs_, inputs, B, T, source, 0);
    replay_evaluations_ += rs_->controller_evaluations - before;
    Traits::loss(*rs_, targets, window_nll);
  }
  void set_prefix_reuse(bool enabled) override {
    if constexpr (requires { rs_->prefix; }) rs_->prefix.enabled = enabled;
  }
  int64_t prefix_reuses() const override {
    if constexpr (requires { rs_->prefix; }) return rs_->prefix.reused_passes;
    return 0;
  }
  const float* last_logits() const override { return rs_->logits; }
  void poison_logits(int B, int T) override {
    std::fill(rs_->logits, rs_->logits + int64_t(B) * T * this->vocab(), std::numeric_limits<float>::quiet_NaN());
  }
  int64_t replay_controller_evaluations() const override { return replay_evaluations_; }
  size_t run_state_bytes() const override { return rs_->bytes(); }
  size_t packed_weights_bytes() const override { return packed_.bytes(); }
  void set_max_batch(int max_batch) override {
    rs_.reset();  // the old activations go first: the peak is one run state, not two
    rs_ = make_run_state(max_batch);
  }
  // Families whose run state can drop intermediates (Traits::run_state takes a fourth argument,
  // keep_all) keep them all from the next set_max_batch on; the others always keep them.
  void set_keep_intermediates(bool keep) override { keep_intermediates_ = keep; }
  const float* last_position_losses() const override { return nullptr; }
  std::vector<TraceTensor> trace_tensors(int, int, bool) const override { return {}; }
  int max_batch() const override { return rs_->max_batch; }
  const Model& model() const { return model_; }

 protected:
  FamilyAuditable(Model model, int max_batch, int max_tokens)
      : model_(std::move(model)),
        max_tokens_(max_tokens),
        rs_(make_run_state(max_batch)) {
    declare_packable_weights(packed_, model_);
  }
  Model model_;
  // The model's rank-2 tensors (declare_packable_weights), installed around every pass.
  PackedWeights packed_;
  int max_tokens_;
  // Declared before rs_: the constructor builds rs_ from it (members initialise in this order).
  bool keep_intermediates_ = false;
  std::unique_ptr<typename Traits::RunState> rs_;

 private:
  std::unique_ptr<typename Traits::RunState> make_run_state(int max_batch) const {
    if constexpr (requires { Traits::run_state(model_, max_batch, max_tokens_, true); })
      return std::make_unique<typename Traits::RunState>(Traits::run_state(model_, max_batch, max_tokens_, keep_intermediates_));
    else
      return std::make_unique<typename Traits::RunState>(Traits::run_state(model_, max_batch, max_tokens_));
  }
  // A recording sink or a replayed tensor must have the family's record shape and mask for T tokens
  // (those of make_coefficients, cached per T): the sources copy whole rows of it, and a family with
  // packed rows (recorded_source.h) takes each layer's row width from the mask.
  void check_record_shape(const CoefficientTensor& c, int T, const char* what) {
    if (record_shape_tokens_ != T) {
      const CoefficientTensor one = this->make_coefficients(1, T);
      record_shape_ = one.shape();
      record_mask_ = one.mask();
      record_shape_tokens_ = T;
    }
    if (!(c.shape() == record_shape_))
      throw Error(std::string(what) + ": shape " + c.shape().to_string() + ", but a " + this->family() + " model's record for " +
                  std::to_string(T) + " tokens is " + record_shape_.to_string());
    if (c.mask() != record_mask_)
      throw Error(std::string(what) + ": its mask of valid (layer, stream, source) coordinates is not a " + this->family() +
                  " model's (make_coefficients)");
  }
  int record_shape_tokens_ = -1;
  CoefficientShape record_shape_;
  std::vector<uint8_t> record_mask_;
  int64_t replay_evaluations_ = 0;
};

// A byte-level family with single-file checkpoints (moe, mod, exit; the test binary's toy family,
// whose record is continuous): everything but the names comes from the model. Traits add: kFamily, record_shape(config, tokens), describe(config),
// kStaticProfile and kStructureRemoved (the profile names the audit prints).
template <typename Traits>
class ByteLevelAuditable : public FamilyAuditable<Traits> {
 public:
  ByteLevelAuditable(const std::string& path, int max_batch, int max_tokens)
      : FamilyAuditable<Traits>(Traits::Model::load(path), max_batch, max_tokens), hash_(sha256_file(path)) {}
  std::string family() const override { return Traits::kFamily; }
  std::string description() const override { return Traits::describe(this->model_.config()); }
  std::string content_hash() const override { return hash_; }
  std::string config_json() const override { return this->model_.config().to_json(); }
  size_t parameter_count() const override { return layout_parameter_count(this->model_.layout()); }
  int max_tokens() const override { return this->model_.config().seq_len; }
  int vocab() const override { return kByteVocab; }
  std::vector<int32_t> tokenize(const std::string&, std::span<const unsigned char> text) const override {
    return std::vector<int32_t>(text.begin(), text.end());
  }
  CoefficientTensor make_coefficients(int windows, int tokens) const override {
    return CoefficientTensor(windows, Traits::record_shape(this->model_.config(), tokens));
  }
  std::string static_profile_name() const override { return Traits::kStaticProfile; }
  std::string structure_removed_name() const override { return Traits::kStructureRemoved; }

 private:
  std::string hash_;
};

}  // namespace fca
