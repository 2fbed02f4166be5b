#include "models/mod/train/trainable.h"

namespace fca {

namespace {

// The config of a fresh model of this shape and these settings; errors prefixed by `where`.
ModConfig config_of(const ModelShape& shape, const nlohmann::json& settings, const std::string& where) {
  ModConfig c;
  c.n_layer = shape.layers;
  c.d_model = shape.dim;
  c.n_head = shape.heads;
  c.seq_len = shape.seq;
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
  f.settings = {{"capacity", "share c of each window's tokens a routed block runs, in (0, 1]", 0.125, {}},
                {"routed_every", "blocks routed_every-1, 2 routed_every-1, ... are routed", 2, {}}};
  f.files = [](const std::string& out) { return CheckpointFiles{out, single_file_state(out), out + ".log.jsonl"}; };
  f.check = [](const ModelShape& shape, const nlohmann::json& settings, const std::string& where) {
    config_of(shape, settings, where);
  };
  f.make = [](const ModelShape& shape, const nlohmann::json& settings, const TrainableArgs& args, const std::string& where) {
    const ModConfig c = config_of(shape, settings, where);
    return std::unique_ptr<Trainable>(std::make_unique<FlatTrainable<ModFamily>>(c, args.seed, args.batch, args.adamw, args.clip));
  };
  return f;
}

}  // namespace fca
