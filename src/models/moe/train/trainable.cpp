#include "models/moe/train/trainable.h"

#include <limits>

namespace fca {

namespace {

// The config of a fresh model of this shape and these settings; errors prefixed by `where`.
MoeConfig config_of(const ModelShape& shape, const nlohmann::json& settings, const std::string& where) {
  MoeConfig c = config_with_shape<MoeConfig>(shape);
  c.n_expert = settings.at("experts").get<int>();
  c.top_k = settings.at("top_k").get<int>();
  c.expert_hidden = settings.at("expert_hidden").get<int>();
  c.aux_loss = settings.at("aux_loss").get<double>();
  c.validate(where);
  return c;
}

}  // namespace

TrainFamily moe_train_family() {
  TrainFamily f;
  f.name = "moe";
  f.description = "moe: top-k mixture of experts";
  const double unbounded = std::numeric_limits<double>::infinity();
  f.settings = {{"experts", "number of experts E", 8, {}, in_range(1, 4096)},
                {"top_k", "experts per token k (1 <= k <= E)", 2, {}, in_range(1, 4096)},
                {"expert_hidden", "expert width F (0 = 4D/k)", 0, {}, in_range(0, 1 << 20)},
                {"aux_loss", "weight alpha of the load-balancing term", 0.01, {}, in_range(0, unbounded)}};
  f.files = single_file_checkpoint;
  set_constructors<MoeConfig>(f, config_of, [](const MoeConfig& c, const TrainableArgs& args) {
    return std::unique_ptr<Trainable>(std::make_unique<FlatTrainable<MoeFamily>>(c, args.seed, args.batch, args.adamw, args.clip));
  });
  return f;
}

}  // namespace fca
