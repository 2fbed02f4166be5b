// A Trainable for models in the parameter store (models/parameters.h): one template for every
// family, which supplies its passes for TrainStep plus `nll` (validation NLL without any auxiliary
// term), `seq_len(config)` (the window length), a live coefficient source constructed from the model
// and a Model with initialized / load / save (a single file or a folder: the TrainFamily's `files`
// say which), and optionally `add_gates` (validation then reports the gate mass).
#pragma once
#include "core/json.h"
#include <vector>

#include "core/error.h"
#include "data/corpus.h"
#include "train/train_step.h"
#include "train/trainable.h"

namespace fca {

template <typename Family>
class FlatTrainable : public Trainable {
 public:
  using Model = typename Family::Model;
  FlatTrainable(const typename Family::Config& config, uint64_t seed, int batch, AdamWOptions adamw, double clip)
      : model_(Model::initialized(config, seed)), step_(model_, batch, Family::seq_len(config), adamw, clip) {}
  nlohmann::ordered_json config_json() const override { return nlohmann::ordered_json::parse(model_.config().to_json()); }
  int seq_len() const override { return Family::seq_len(model_.config()); }
  size_t parameter_count() const override { return layout_parameter_count(model_.layout()); }
  const std::vector<TensorSlot>& layout() const override { return model_.layout(); }
  AdamW& optimizer() override { return step_.optimizer(); }
  StepStats step(const int32_t* inputs, const int32_t* targets, int micro_batches, double lr,
                 const Communicator& comm) override {
    return step_.run(inputs, targets, micro_batches, lr, comm);
  }
  // Mean NLL over `windows` evenly spaced windows, live routing.
  ValidStats validate(const TextSplit& valid, int64_t windows, int batch) override {
    const int T = Family::seq_len(model_.config());
    const auto idx = evenly_spaced_windows(valid.window_count(T), windows, valid.name());
    typename Family::RunState rs(model_.config(), batch, T, false);
    std::vector<int32_t> inputs(size_t(batch) * T), targets(size_t(batch) * T);
    std::vector<double> nll(idx.size());
    // A family whose run state holds gates (Family::add_gates) also reports the gate mass: every
    // gate of every batch added into one sum, in the family's order.
    constexpr bool gates = requires(typename Family::RunState& r, double& sum) { Family::add_gates(r, 1, 1, sum); };
    double gate_sum = 0;
    int64_t gate_count = 0;
    for (size_t w0 = 0; w0 < idx.size(); w0 += size_t(batch)) {
      const int B = int(std::min<size_t>(size_t(batch), idx.size() - w0));
      for (int b = 0; b < B; ++b)
        valid.window(idx[w0 + size_t(b)], T, inputs.data() + int64_t(b) * T, targets.data() + int64_t(b) * T);
      typename Family::Live live(model_);
      Family::forward(model_, rs, inputs.data(), B, T, live);
      Family::nll(rs, targets.data(), nll.data() + w0);
      if constexpr (gates) gate_count += Family::add_gates(rs, B, T, gate_sum);
    }
    double s = 0;
    for (double v : nll) s += v;
    return {s / double(nll.size()), gates ? gate_sum / double(gate_count) : -1.0, int64_t(nll.size())};
  }
  void save(const std::string& out, const std::map<std::string, std::string>& metadata) const override {
    model_.save(out, metadata);
  }
  void load(const std::string& out) override {
    const Model loaded = Model::load(out);  // copies: training writes the weights
    if (!(loaded.config() == model_.config()))
      throw Error(out + ": the checkpoint's model config differs from the flags' (checkpoint " + loaded.config().to_json() +
                  ", flags " + model_.config().to_json() + ")");
    std::copy(loaded.data(), loaded.data() + loaded.buffer_size(), model_.data());
  }
  size_t run_state_bytes() const override { return step_.run_state_bytes(); }

 private:
  Model model_;
  TrainStep<Family> step_;
};

}  // namespace fca
