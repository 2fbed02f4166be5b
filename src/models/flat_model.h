// The one parameter store of the single-file model families (gated, moe, mod): a config, one named
// parameter buffer laid out by the family, and the named weight pointers bound to it. A family supplies a Spec:
//   Config (validate / to_json / from_json, n_layer), kFormat, layout(config) -> slots,
//   template <T> Weights<T>, template <T> bind(ParameterBuffer<T>&, config) -> Weights<T>,
//   describe(config) (how messages name a model: "moe model with 4 layers, ..."), and optionally
//   template <T> finish_initialization(Weights<T>&, config) after the generic initialisation.
// Read-only during inference; one model serves many run states.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "core/safetensors.h"
#include "models/parameters.h"

namespace fca {

template <typename T, typename Spec>
class FlatModel {
 public:
  using Config = typename Spec::Config;
  using Weights = typename Spec::template Weights<T>;

  FlatModel() = default;
  explicit FlatModel(const Config& config) : config_(config), params_(Spec::layout(config)) { bind(); }  // all zero
  FlatModel(const FlatModel& other) : config_(other.config_), params_(other.params_) { bind(); }
  // Moves hand over the buffer (a moved std::vector keeps its address), so the views stay bound.
  FlatModel(FlatModel&&) noexcept = default;
  FlatModel& operator=(FlatModel&&) noexcept = default;
  FlatModel& operator=(const FlatModel& other) {
    if (this != &other) {
      config_ = other.config_;
      params_ = other.params_;
      bind();
    }
    return *this;
  }

  // The gated family's initialisation (docs/model.md, ParameterBuffer::initialize) from one seed.
  static FlatModel initialized(const Config& config, uint64_t seed) {
    config.validate("initialisation");
    FlatModel m(config);
    m.params_.initialize(config.n_layer, seed);
    // A family whose tensors the generic rule does not cover sets them here (no random draws, so
    // the block weights stay those of any family drawn from the same seed).
    if constexpr (requires { Spec::finish_initialization(m.weights_, config); })
      Spec::finish_initialization(m.weights_, config);
    return m;
  }
  // Loads a file of the family's format: format, config and every tensor checked; extra tensors
  // are errors.
  static FlatModel load(const std::string& path) {
    const Config config = Config::from_json(read_checkpoint_config(path, Spec::kFormat), path);
    SafetensorsReader reader(path);
    check_parameters_fit(layout_parameter_count(Spec::layout(config)), path);
    FlatModel m(config);
    m.params_.load(reader, Spec::describe(config));
    return m;
  }
  // Writes F32 parameters with metadata format, config and `extra`, atomically.
  void save(const std::string& path, const std::map<std::string, std::string>& extra = {}) const {
    std::map<std::string, std::string> metadata = extra;
    metadata["format"] = Spec::kFormat;
    metadata["config"] = config_.to_json();
    params_.save(path, metadata);
  }

  const Config& config() const { return config_; }
  const std::vector<TensorSlot>& layout() const { return params_.layout(); }
  const T* slot(size_t i) const { return params_.slot(i); }  // layout()[i]'s values, wherever they lie
  T* data() { return params_.data(); }
  const T* data() const { return params_.data(); }
  size_t buffer_size() const { return params_.size(); }
  const Weights& weights() const { return weights_; }
  Weights& weights() { return weights_; }
  // Pointer to the tensor named `name`; throws Error when the model has no such tensor.
  T* tensor(const std::string& name) { return params_.at(name); }
  const T* tensor(const std::string& name) const { return const_cast<FlatModel*>(this)->params_.at(name); }
  // The same model in another precision (gradient checks run in double).
  template <typename U>
  static FlatModel converted_from(const FlatModel<U, Spec>& other) {
    FlatModel m(other.config());
    for (size_t i = 0; i < m.buffer_size(); ++i) m.data()[i] = static_cast<T>(other.data()[i]);
    return m;
  }

 private:
  void bind() { weights_ = Spec::bind(params_, config_); }
  Config config_;
  ParameterBuffer<T> params_;
  Weights weights_{};
};

}  // namespace fca
