#include "models/mudd/train/trainable.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "models/base/stream.h"

namespace fca {

namespace {

// The config of a fresh model of this shape and these settings; errors prefixed by `where`.
MuddConfig config_of(const ModelShape& shape, const nlohmann::json&, const std::string& where) {
  // Byte-level MUDD (docs/mudd.md, "Training").
  MuddConfig m;
  m.n_layer = shape.layers;
  m.dim = shape.dim;
  m.n_head = shape.heads;
  m.head_dim = shape.heads > 0 ? shape.dim / shape.heads : 0;
  m.vocab_size = kByteVocab;
  m.block_size = shape.seq;
  m.intermediate_size = 4 * shape.dim;
  if (m.n_layer < 2) throw Error(where + ": the mudd family needs at least 2 layers, found " + std::to_string(m.n_layer));
  if (shape.dim <= 0 || shape.heads <= 0 || shape.seq <= 0 || shape.dim % shape.heads != 0)
    throw Error(where + ": the mudd family needs positive dim, heads and seq with heads dividing dim (found dim " +
                std::to_string(shape.dim) + ", heads " + std::to_string(shape.heads) + ", seq " + std::to_string(shape.seq) + ")");
  if (m.rotary_dims() % 2 != 0 || m.rotary_dims() == 0)
    throw Error(where + ": the mudd family needs a quarter of the head width (" + std::to_string(m.head_dim) +
                "/4) to be a positive even number");
  return m;
}

}  // namespace

TrainFamily mudd_train_family() {
  TrainFamily f;
  f.name = "mudd";
  f.description = "mudd: dynamic dense connections (docs/mudd.md; --out is then a folder)";
  f.checkpoint_is_folder = true;
  f.files = [](const std::string& out) {
    return CheckpointFiles{out + "/model.safetensors", out + "/train-state.safetensors", out + "/train.log.jsonl"};
  };
  set_constructors<MuddConfig>(f, config_of, [](const MuddConfig& c, const TrainableArgs& args) {
    return std::unique_ptr<Trainable>(std::make_unique<MuddTrainable>(c, args.seed, args.batch, args.adamw, args.clip));
  });
  return f;
}

}  // namespace fca
