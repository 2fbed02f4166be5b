#include "models/mod/train/trainable.h"

namespace fca {

namespace {

// The config of a fresh model of this shape and these settings; errors prefixed by `where`.
ModConfig config_of(const ModelShape& shape, const nlohmann::json& settings, const std::string& where) {
  ModConfig c = config_with_shape<ModConfig>(shape);
  c.capacity = settings.at("capacity").get<double>();
  c.routed_every = settings.at("routed_every").get<int>();
  c.validate(where);
  return c;
}

}  // namespace

TrainFamily mod_train_family() {
  TrainFamily f;
  f.name = "mod";
  f.description = "mod: Mixture-of-Depths";
  f.settings = {{"capacity", "share c of each window's tokens a routed block runs, in (0, 1]", 0.125, {}, in_range(0, 1, true)},
                {"routed_every", "blocks routed_every-1, 2 routed_every-1, ... are routed", 2, {}, in_range(1, 1 << 20)}};
  f.files = single_file_checkpoint;
  set_constructors<ModConfig>(f, config_of, [](const ModConfig& c, const TrainableArgs& args) {
    return std::unique_ptr<Trainable>(std::make_unique<FlatTrainable<ModFamily>>(c, args.seed, args.batch, args.adamw, args.clip));
  });
  return f;
}

}  // namespace fca
