#include "models/exit/model.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/parse.h"
#include "core/json.h"
#include "models/base/stream.h"

namespace fca {

double ExitConfig::exit_loss_weight(int k) const {
  double total = 0;
  for (int i = min_exit; i <= n_layer; ++i) total += i;
  return double(k) / total;
}

void ExitConfig::validate(const std::string& where) const {
  require_positive(n_layer, "n_layer", where);
  require_positive(d_model, "d_model", where);
  require_positive(n_head, "n_head", where);
  require_positive(seq_len, "seq_len", where);
  check_transformer_shape(n_layer, d_model, n_head, seq_len, where);
  if (d_model % n_head != 0)
    throw Error(where + ": d_model " + std::to_string(d_model) + " is not divisible by n_head " + std::to_string(n_head));
  if (n_layer < 2) throw Error(where + ": an exit model needs n_layer >= 2 (an exit point below the last block), found " + std::to_string(n_layer));
  if (min_exit < 1 || min_exit > n_layer - 1)
    throw Error(where + ": min_exit must be in [1, n_layer - 1] = [1, " + std::to_string(n_layer - 1) + "], found " +
                std::to_string(min_exit));
  if (!std::isfinite(exit_threshold))
    throw Error(where + ": exit_threshold must be a finite number, found " + number_text(exit_threshold));
  if (exit_head_steps < 0) throw Error(where + ": exit_head_steps must be >= 0, found " + std::to_string(exit_head_steps));
}

std::string ExitConfig::to_json() const {
  nlohmann::ordered_json j;
  write_shape_fields(j, *this);
  j["min_exit"] = min_exit;
  j["exit_threshold"] = exit_threshold;
  j["exit_head_steps"] = exit_head_steps;
  return j.dump();
}

ExitConfig ExitConfig::from_json(const std::string& text, const std::string& where) {
  const StrictConfig j(text, where,
                       {"n_layer", "d_model", "n_head", "seq_len", "min_exit", "exit_threshold", "exit_head_steps"},
                       kExitFormat);
  ExitConfig c;
  read_shape_fields(j, c);
  c.min_exit = j.integer("min_exit");
  c.exit_threshold = j.number("exit_threshold");
  c.exit_head_steps = j.integer("exit_head_steps");
  c.validate(where);
  return c;
}

std::vector<TensorSlot> exit_tensor_layout(const ExitConfig& c) {
  // The gated Dense layout, tensor for tensor (so that a dense checkpoint's trunk maps by name),
  // then the classifiers.
  LayoutBuilder b;
  const int64_t D = c.d_model;
  b.add_byte_trunk(c.n_layer, D, c.seq_len, [&](LayoutBuilder& block, const std::string& p, int) { block.add_dense_block(p, D); });
  b.add("exit.weight", {c.exit_points(), D}, false);  // phase 2 trains it without weight decay
  b.add("exit.bias", {c.exit_points()}, false);
  return b.slots;
}

template <typename T>
ExitWeights<T> ExitSpec::bind(ParameterBuffer<T>& params, const ExitConfig& c) {
  ExitWeights<T> w;
  bind_byte_trunk(w, [&](const std::string& name) { return params.at(name); });
  for (int l = 0; l < c.n_layer; ++l) w.blocks.push_back(params.block(block_prefix(l)));
  w.exit_weight = params.find("exit.weight");
  w.exit_bias = params.find("exit.bias");
  return w;
}

std::string ExitSpec::describe(const ExitConfig& c) {
  return "exit model with " + std::to_string(c.n_layer) + " layers (min exit " + std::to_string(c.min_exit) + ")";
}

float exit_logit_threshold(double lambda) {
  if (lambda >= 1.0) return std::numeric_limits<float>::infinity();
  if (lambda <= 0.0) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(std::log(lambda / (1.0 - lambda)));
}

template ExitWeights<float> ExitSpec::bind<float>(ParameterBuffer<float>&, const ExitConfig&);
template ExitWeights<double> ExitSpec::bind<double>(ParameterBuffer<double>&, const ExitConfig&);

}  // namespace fca
