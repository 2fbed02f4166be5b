#include "models/mudd/train/trainable.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"

namespace fca {

MuddTrainable::MuddTrainable(const MuddConfig& config, uint64_t seed, int batch, AdamWOptions adamw, double clip)
    : model_(MuddModel<float>::initialized(config, seed)), step_(model_, batch, config.block_size, adamw, clip) {}

nlohmann::ordered_json MuddTrainable::config_json() const { return nlohmann::ordered_json::parse(model_.config().to_json()); }

ValidStats MuddTrainable::validate(const TextSplit& valid, int64_t windows, int batch) {
  const int T = model_.config().block_size;
  const auto idx = evenly_spaced_windows(valid.window_count(T), windows, valid.name());
  MuddRunState<float> rs(model_.config(), batch, T, false);
  std::vector<int32_t> inputs(size_t(batch) * T), targets(size_t(batch) * T);
  std::vector<double> nll(idx.size());
  for (size_t w0 = 0; w0 < idx.size(); w0 += size_t(batch)) {
    const int B = int(std::min<size_t>(size_t(batch), idx.size() - w0));
    for (int b = 0; b < B; ++b) valid.window(idx[w0 + size_t(b)], T, inputs.data() + int64_t(b) * T, targets.data() + int64_t(b) * T);
    MuddLiveCoefficients<float> live(model_);
    mudd_forward(model_, rs, inputs.data(), B, T, live);
    mudd_loss(rs, targets.data(), nll.data() + w0);
  }
  double s = 0;
  for (double v : nll) s += v;
  return {s / double(nll.size()), -1, int64_t(nll.size())};
}

void MuddTrainable::save(const std::string& out, const std::map<std::string, std::string>& metadata) const {
  model_.save(out, metadata);
}

void MuddTrainable::load(const std::string& out) {
  MuddModel<float> loaded = MuddModel<float>::load(out);
  if (loaded.config().to_json() != model_.config().to_json())
    throw Error(out + ": --resume with a different model config");
  std::copy(loaded.data(), loaded.data() + loaded.buffer_size(), model_.data());
}

namespace {

// The config of a fresh model of this shape and these settings; errors prefixed by `where`.
MuddConfig config_of(const ModelShape& shape, const nlohmann::json&, const std::string& where) {
  // Byte-level MUDD (spec muddpythia.md section 11).
  MuddConfig m;
  m.n_layer = shape.layers;
  m.dim = shape.dim;
  m.n_head = shape.heads;
  m.head_dim = shape.heads > 0 ? shape.dim / shape.heads : 0;
  m.vocab_size = 256;
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
  f.description = "mudd: dynamic dense connections (muddpythia spec; --out is then a folder)";
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
