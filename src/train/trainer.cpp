#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/progress.h"
#include "core/provenance.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "core/sha256.h"
#include "core/threads.h"
#include "models/gated/forward.h"
#include "train/evaluate.h"

namespace fca {
namespace {

constexpr const char* kTrainStateFormat = "fca-train-state-v1";

nlohmann::ordered_json options_json(const TrainOptions& o) {
  nlohmann::ordered_json j;
  j["config"] = nlohmann::json::parse(o.config.to_json());
  j["batch"] = o.batch;
  j["grad_accum"] = o.grad_accum;
  j["steps"] = o.steps;
  j["lr"] = o.lr;
  j["warmup"] = o.warmup;
  j["min_lr_ratio"] = o.min_lr_ratio;
  j["clip"] = o.clip;
  j["beta1"] = o.adamw.beta1;
  j["beta2"] = o.adamw.beta2;
  j["eps"] = o.adamw.eps;
  j["weight_decay"] = o.adamw.weight_decay;
  j["seed"] = o.seed;
  j["eval_every"] = o.eval_every;
  j["eval_windows"] = o.eval_windows;
  return j;
}

// Writes the model, then the optimizer state naming the model file's hash (a crash between the two
// leaves a pair that resume refuses rather than silently mixes).
void save_checkpoint(const TrainOptions& o, const GatedModel<float>& model, AdamW& optimizer, int64_t step,
                     const std::string& data_hash) {
  model.save(o.out, {{"fca_version", fca_version_string()}, {"train_step", std::to_string(step)},
                     {"train_seed", std::to_string(o.seed)}, {"train_data_sha256", data_hash}});
  std::vector<TensorToWrite> tensors;
  for (const auto& s : model.layout()) {
    tensors.push_back({"adam.m." + s.name, s.shape, optimizer.first_moment().data() + s.offset});
    tensors.push_back({"adam.v." + s.name, s.shape, optimizer.second_moment().data() + s.offset});
  }
  write_safetensors(train_state_path(o.out), tensors,
                    {{"format", kTrainStateFormat},
                     {"step", std::to_string(step)},
                     {"options", options_json(o).dump()},
                     {"model_sha256", sha256_file(o.out)}});
}

int64_t load_checkpoint(const TrainOptions& o, GatedModel<float>& model, AdamW& optimizer) {
  const std::string state_path = train_state_path(o.out);
  model = GatedModel<float>::load(o.out);
  if (!(model.config() == o.config))
    throw Error(o.out + ": --resume with a different model config (checkpoint " + model.config().to_json() +
                ", flags " + o.config.to_json() + ")");
  SafetensorsReader state(state_path);
  const auto& meta = state.metadata();
  auto field = [&](const char* key) {
    auto it = meta.find(key);
    if (it == meta.end()) throw Error(state_path + ": metadata field '" + key + "' is missing");
    return it->second;
  };
  if (field("format") != kTrainStateFormat)
    throw Error(state_path + ": format is \"" + field("format") + "\", expected \"" + kTrainStateFormat + "\"");
  if (field("model_sha256") != sha256_file(o.out))
    throw Error(state_path + ": was written for a different " + o.out + " (model hash mismatch)");
  const auto saved = nlohmann::json::parse(field("options"));
  const auto now = options_json(o);
  for (auto it = now.begin(); it != now.end(); ++it)
    if (saved.contains(it.key()) && saved[it.key()] != it.value())
      throw Error(state_path + ": --resume with a different " + it.key() + " (saved " + saved[it.key()].dump() +
                  ", now " + it.value().dump() + ")");
  for (const auto& s : model.layout()) {
    state.read_into<float>("adam.m." + s.name, s.shape, optimizer.first_moment().data() + s.offset);
    state.read_into<float>("adam.v." + s.name, s.shape, optimizer.second_moment().data() + s.offset);
  }
  const int64_t step = std::stoll(field("step"));
  optimizer.set_steps_taken(step);
  return step;
}

}  // namespace

GatedTrainStep::GatedTrainStep(GatedModel<float>& model, int batch, int tokens, AdamWOptions adamw, double clip)
    : model_(model),
      grads_(model.config()),
      rs_(model.config(), batch, tokens, true),
      optimizer_(model.layout(), model.buffer_size(), adamw),
      clip_(clip) {}

GatedTrainStep::Stats GatedTrainStep::run(const int32_t* inputs, const int32_t* targets, int micro_batches,
                                          double lr) {
  const int B = rs_.max_batch, T = rs_.max_tokens;
  const float loss_scale = 1.0f / float(int64_t(B) * T * micro_batches);
  std::fill(grads_.data(), grads_.data() + grads_.buffer_size(), 0.0f);
  Stats stats{0, 0};
  for (int k = 0; k < micro_batches; ++k) {
    LiveCoefficients<float> live(model_);
    const int64_t offset = int64_t(k) * B * T;
    gated_forward(model_, rs_, inputs + offset, B, T, live);
    stats.loss += gated_loss(rs_, targets + offset, nullptr) / micro_batches;
    gated_backward(model_, rs_, grads_, loss_scale);
  }
  stats.grad_norm = global_norm(grads_.data(), grads_.buffer_size());
  if (!std::isfinite(stats.loss) || !std::isfinite(stats.grad_norm))
    throw Error("training diverged (loss " + std::to_string(stats.loss) + ", gradient norm " +
                std::to_string(stats.grad_norm) + "): lower --lr");
  if (clip_ > 0 && stats.grad_norm > clip_)
    scale_buffer(grads_.data(), grads_.buffer_size(), float(clip_ / stats.grad_norm));
  optimizer_.step(model_.data(), grads_.data(), lr);
  return stats;
}

std::string train_state_path(const std::string& checkpoint) {
  const std::string suffix = ".safetensors";
  const std::string stem = checkpoint.size() > suffix.size() && checkpoint.ends_with(suffix)
                               ? checkpoint.substr(0, checkpoint.size() - suffix.size())
                               : checkpoint;
  return stem + ".train-state.safetensors";
}

TrainResult train_gated(const TrainOptions& o, const Corpus& corpus) {
  o.config.validate("training flags");
  if (o.out.empty()) throw Error("--out is required");
  if (o.batch <= 0 || o.grad_accum <= 0 || o.steps <= 0)
    throw Error("batch, grad-accum and steps must be positive");
  const int T = o.config.seq_len;
  const TextSplit& train = corpus.split("train");
  const TextSplit& valid = corpus.split("valid");
  train.window_count(T);  // both splits must hold at least one window: fail before training
  valid.window_count(T);
  const std::string data_hash = train.content_hash();

  GatedModel<float> model = GatedModel<float>::initialized(o.config, o.seed);
  GatedTrainStep trainer(model, o.batch, T, o.adamw, o.clip);
  AdamW& optimizer = trainer.optimizer();
  int64_t first_step = 0;
  if (o.resume) first_step = load_checkpoint(o, model, optimizer);

  const std::string log_path = o.log_path.empty() ? o.out + ".log.jsonl" : o.log_path;
  std::ofstream log(log_path, o.resume ? std::ios::app : std::ios::trunc);
  if (!log) throw Error(log_path + ": cannot open the training log for writing");
  {
    nlohmann::ordered_json start;
    start["type"] = o.resume ? "resume" : "start";
    start["step"] = first_step;
    start["provenance"] = provenance_base();
    start["options"] = options_json(o);
    start["parameters"] = gated_parameter_count(o.config);
    start["data"] = {{"dir", corpus.dir()}, {"train_sha256", data_hash}, {"valid_sha256", valid.content_hash()}};
    log << start.dump() << "\n" << std::flush;
  }

  const int64_t last_step = o.stop_after > 0 ? std::min(o.steps, first_step + o.stop_after) : o.steps;
  const size_t micro = size_t(o.batch) * T;
  std::vector<int32_t> inputs(micro * o.grad_accum), targets(micro * o.grad_accum);
  TrainResult result;
  Progress progress("train", last_step - first_step, "step");
  const auto start = std::chrono::steady_clock::now();
  double loss = 0;
  for (int64_t step = first_step; step < last_step; ++step) {
    for (int k = 0; k < o.grad_accum; ++k) {
      Rng rng(derive_seed(o.seed, uint64_t(step), uint64_t(k)));
      for (int b = 0; b < o.batch; ++b) {
        const size_t row = k * micro + size_t(b) * T;
        train.window_at(size_t(rng.below(train.size() - size_t(T))), T, inputs.data() + row, targets.data() + row);
      }
    }
    const double lr = learning_rate(step, o.steps, o.warmup, o.lr, o.min_lr_ratio);
    GatedTrainStep::Stats stats;
    try {
      stats = trainer.run(inputs.data(), targets.data(), o.grad_accum, lr);
    } catch (const Error& e) {
      throw Error("step " + std::to_string(step) + ": " + e.what());
    }
    loss = stats.loss;
    const double norm = stats.grad_norm;

    const int64_t done = step + 1;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double tokens_per_s = double(done - first_step) * o.batch * o.grad_accum * T / elapsed;
    char detail[96];
    std::snprintf(detail, sizeof detail, "loss %.4f  %.0f tok/s", loss, tokens_per_s);
    if (o.progress) progress.update(done - first_step, detail);
    if (done % o.log_every == 0 || done == last_step) {
      nlohmann::ordered_json j{{"type", "step"}, {"step", done}, {"loss", loss}, {"lr", lr}, {"grad_norm", norm},
                               {"tokens_per_s", tokens_per_s}, {"elapsed_s", elapsed}};
      log << j.dump() << "\n" << std::flush;
    }
    if ((o.eval_every > 0 && done % o.eval_every == 0) || done == o.steps) {
      const EvalResult v = evaluate_gated(model, valid, T, std::min(o.eval_windows, valid.window_count(T)), o.batch, false);
      nlohmann::ordered_json j{{"type", "valid"}, {"step", done}, {"nll", v.nll}, {"bits_per_byte", v.bits_per_byte},
                               {"byte_ppl", v.byte_ppl}, {"gate_mass", v.gate_mass}, {"windows", v.windows.size()}};
      log << j.dump() << "\n" << std::flush;
      result.final_valid_nll = v.nll;
      if (o.progress) {
        char line[128];
        std::snprintf(line, sizeof line, "step %ld: valid NLL %.4f nats/byte, %.3f bits/byte, gate mass %.3f",
                      long(done), v.nll, v.bits_per_byte, v.gate_mass);
        progress.note(line);
      }
    }
    if ((o.checkpoint_every > 0 && done % o.checkpoint_every == 0) || done == last_step)
      save_checkpoint(o, model, optimizer, done, data_hash);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.steps_done = last_step;
  result.final_loss = loss;
  result.tokens_per_second = double(last_step - first_step) * o.batch * o.grad_accum * T / result.seconds;
  if (o.progress) {
    char detail[96];
    std::snprintf(detail, sizeof detail, "loss %.4f", loss);
    progress.finish(detail);
  }
  nlohmann::ordered_json end{{"type", "end"}, {"step", last_step}, {"loss", loss}, {"seconds", result.seconds},
                             {"tokens_per_s", result.tokens_per_second}};
  log << end.dump() << "\n" << std::flush;
  return result;
}

}  // namespace fca
