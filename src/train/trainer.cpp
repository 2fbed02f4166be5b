#include "core/parse.h"
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include "core/json.h"

#include "core/error.h"
#include "core/file_io.h"
#include "core/progress.h"
#include "ops/provenance.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "core/sha256.h"
#include "models/registry.h"

namespace fca {
namespace {

constexpr const char* kTrainStateFormat = "fca-train-state-v1";

nlohmann::ordered_json options_json(const TrainOptions& o, const Trainable& model) {
  nlohmann::ordered_json j;
  j["arch"] = o.arch;
  j["config"] = model.config_json();
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

// Writes the weights, then the optimizer state naming the weights file's hash (a crash between the
// two leaves a pair that resume refuses rather than silently mixes).
// phases_done: the later phases (Trainable::later_phases) finished in the weights written.
void save_checkpoint(const TrainOptions& o, const CheckpointFiles& files, Trainable& model, int64_t step,
                     const std::string& data_hash, size_t phases_done = 0) {
  // Only models with later phases record how many are done (the others' files stay as they were).
  const bool phased = !model.later_phases().empty();
  std::map<std::string, std::string> weights_metadata{{"fca_version", fca_version_string()},
                                                      {"train_step", std::to_string(step)},
                                                      {"train_seed", std::to_string(o.seed)},
                                                      {"train_data_sha256", data_hash}};
  if (phased) weights_metadata["train_phases_done"] = std::to_string(phases_done);
  model.save(o.out, weights_metadata);
  AdamW& optimizer = model.optimizer();
  std::vector<TensorToWrite> tensors;
  for (const auto& s : model.layout()) {
    tensors.push_back({"adam.m." + s.name, s.shape, optimizer.first_moment().data() + s.offset});
    tensors.push_back({"adam.v." + s.name, s.shape, optimizer.second_moment().data() + s.offset});
  }
  std::map<std::string, std::string> state_metadata{{"format", kTrainStateFormat},
                                                    {"step", std::to_string(step)},
                                                    {"options", options_json(o, model).dump()},
                                                    {"model_sha256", sha256_file(files.weights)}};
  if (phased) state_metadata["phases_done"] = std::to_string(phases_done);
  write_safetensors(files.state, tensors, state_metadata);
}

struct Resumed {
  int64_t step = 0;
  size_t phases_done = 0;
};

Resumed load_checkpoint(const TrainOptions& o, const CheckpointFiles& files, Trainable& model) {
  const std::string& state_path = files.state;
  model.load(o.out);
  SafetensorsReader state(state_path);
  const auto& meta = state.metadata();
  auto field = [&](const char* key) {
    auto it = meta.find(key);
    if (it == meta.end()) throw Error(state_path + ": metadata field '" + key + "' is missing");
    return it->second;
  };
  if (field("format") != kTrainStateFormat)
    throw Error(state_path + ": format is \"" + field("format") + "\", expected \"" + kTrainStateFormat + "\"");
  if (field("model_sha256") != sha256_file(files.weights))
    throw Error(state_path + ": was written for a different " + files.weights + " (model hash mismatch)");
  const auto saved = nlohmann::json::parse(field("options"));
  const auto now = options_json(o, model);
  for (auto it = now.begin(); it != now.end(); ++it)
    if (saved.contains(it.key()) && saved[it.key()] != nlohmann::json(it.value()))
      throw Error(state_path + ": --resume with a different " + it.key() + " (saved " + saved[it.key()].dump() +
                  ", now " + it.value().dump() + ")");
  AdamW& optimizer = model.optimizer();
  for (const auto& s : model.layout()) {
    state.read_into<float>("adam.m." + s.name, s.shape, optimizer.first_moment().data() + s.offset);
    state.read_into<float>("adam.v." + s.name, s.shape, optimizer.second_moment().data() + s.offset);
  }
  const int64_t step = parse_integer(field("step"), state_path + ": metadata field \"step\"", 0, int64_t(1) << 40);
  optimizer.set_steps_taken(step);
  // States written before later phases existed have no count: none was done.
  const size_t phases_done = meta.count("phases_done") == 0
                                 ? 0
                                 : size_t(parse_integer(field("phases_done"), state_path + ": metadata field \"phases_done\"", 0,
                                                        int64_t(model.later_phases().size())));
  return {step, phases_done};
}

// The later phases (Trainable::later_phases) from phase `first` on, after the main steps: each runs
// to its end on every rank (the same batches, so the ranks stay equal), then rank 0 validates and
// writes a checkpoint that records it as done. A resumed run starts at the first phase not done.
void run_later_phases(const TrainOptions& o, const CheckpointFiles& files, Trainable& model, const TextSplit& train,
                      const TextSplit& valid, size_t first, const std::string& data_hash, std::ofstream& log,
                      const Communicator& comm) {
  const std::vector<TrainPhase> phases = model.later_phases();
  const int T = model.seq_len();
  std::vector<int32_t> inputs(size_t(o.batch) * T), targets(size_t(o.batch) * T);
  for (size_t ph = first; ph < phases.size(); ++ph) {
    const TrainPhase& phase = phases[ph];
    Progress progress(phase.name, phase.steps, "step");
    double loss = 0;
    for (int64_t step = 0; step < phase.steps; ++step) {
      Rng rng(derive_seed(o.seed + phase.seed_offset, uint64_t(step), 0));
      for (int b = 0; b < o.batch; ++b)
        train.window_at(size_t(rng.below(train.size() - size_t(T))), T, inputs.data() + size_t(b) * T,
                        targets.data() + size_t(b) * T);
      const double lr = learning_rate(step, phase.steps, 0, phase.lr, phase.min_lr_ratio);
      StepStats stats;
      try {
        stats = model.phase_step(ph, inputs.data(), targets.data(), lr);
      } catch (const Error& e) {
        throw Error(phase.name + " step " + std::to_string(step) + ": " + e.what());
      }
      loss = stats.loss;
      char detail[64];
      std::snprintf(detail, sizeof detail, "loss %.4f", loss);
      if (o.progress && comm.root()) progress.update(step + 1, detail);
      if (comm.root() && ((step + 1) % o.log_every == 0 || step + 1 == phase.steps)) {
        nlohmann::ordered_json j{{"type", "step"}, {"phase", phase.name}, {"step", step + 1}, {"loss", loss},
                                 {"lr", lr}, {"grad_norm", stats.grad_norm}};
        log << j.dump() << "\n" << std::flush;
      }
    }
    if (o.progress && comm.root()) progress.finish("loss " + std::to_string(loss));
    if (!comm.root()) continue;
    const ValidStats v = model.validate(valid, std::min(o.eval_windows, valid.window_count(T)), o.batch);
    nlohmann::ordered_json j{{"type", "valid"}, {"phase", phase.name}, {"step", o.steps}, {"nll", v.nll},
                             {"bits_per_byte", v.nll / std::log(2.0)}, {"byte_ppl", std::exp(v.nll)}, {"windows", v.windows}};
    log << j.dump() << "\n" << std::flush;
    save_checkpoint(o, files, model, o.steps, data_hash, ph + 1);
  }
}

}  // namespace

std::unique_ptr<Trainable> make_trainable(const TrainOptions& o) {
  const TrainFamily& family = train_family_named(o.arch);
  return family.make(o.shape, resolve_settings(family, o.settings, "training settings"),
                     TrainableArgs{o.seed, o.batch, o.adamw, o.clip}, "training settings");
}

namespace {

// This rank's options, checked: data parallel over the ranks of `comm` (docs/cluster.md), rank r
// computes micro-batch r of every step, and the run is the single-process run with --grad-accum N
// (train_step.h), recorded as such in the training state so that either layout resumes the other.
TrainOptions rank_options(const TrainOptions& options, const Communicator& comm) {
  TrainOptions o = options;
  if (o.out.empty()) throw Error("--out is required");
  if (o.batch <= 0 || o.grad_accum <= 0 || o.steps <= 0) throw Error("batch, grad-accum and steps must be positive");
  if (comm.size() > 1 && o.grad_accum != 1)
    throw Error("--grad-accum " + std::to_string(o.grad_accum) + " under mpirun: each of the " + std::to_string(comm.size()) +
                " ranks takes one micro-batch per step, so the run already is --grad-accum " + std::to_string(comm.size()) +
                " (use --grad-accum 1, or more ranks)");
  o.grad_accum *= comm.size();
  o.progress = o.progress && comm.root();
  return o;
}

// The log's first record of a run, or of its resumption at first_step.
nlohmann::ordered_json start_record(const TrainOptions& o, const Trainable& model, const Corpus& corpus, int64_t first_step,
                                    const std::string& data_hash, int ranks) {
  nlohmann::ordered_json start;
  start["type"] = o.resume ? "resume" : "start";
  start["step"] = first_step;
  start["provenance"] = provenance_base();
  // The family and its label, for the report (which reads them rather than guessing from a config).
  start["family"] = o.arch;
  start["label"] = family_named(o.arch).label(model.config_json());
  start["options"] = options_json(o, model);
  start["parameters"] = model.parameter_count();
  start["ranks"] = ranks;
  start["data"] = {{"dir", corpus.dir()}, {"train_sha256", data_hash}, {"valid_sha256", corpus.split("valid").content_hash()}};
  return start;
}

// Micro-batches first .. first + count - 1 of `step` into inputs/targets [count, batch, T]: micro-batch
// k's windows are drawn from derive_seed(seed, step, k), whichever rank draws it.
void draw_micro_batches(const TextSplit& train, const TrainOptions& o, int T, int64_t step, int first, int count,
                        int32_t* inputs, int32_t* targets) {
  const size_t micro = size_t(o.batch) * T;
  for (int j = 0; j < count; ++j) {
    Rng rng(derive_seed(o.seed, uint64_t(step), uint64_t(first + j)));
    for (int b = 0; b < o.batch; ++b) {
      const size_t row = j * micro + size_t(b) * T;
      train.window_at(size_t(rng.below(train.size() - size_t(T))), T, inputs + row, targets + row);
    }
  }
}

// Validation after step `done`: its log record, the result's final NLL and a progress note.
void validate_and_log(Trainable& model, const TextSplit& valid, const TrainOptions& o, int T, int64_t done, std::ostream& log,
                      Progress& progress, TrainResult& result) {
  const ValidStats v = model.validate(valid, std::min(o.eval_windows, valid.window_count(T)), o.batch);
  nlohmann::ordered_json j{{"type", "valid"}, {"step", done}, {"nll", v.nll}, {"bits_per_byte", v.nll / std::log(2.0)},
                           {"byte_ppl", std::exp(v.nll)}, {"windows", v.windows}};
  if (v.gate_mass >= 0) j["gate_mass"] = v.gate_mass;
  log << j.dump() << "\n" << std::flush;
  result.final_valid_nll = v.nll;
  if (!o.progress) return;
  char line[160];
  std::snprintf(line, sizeof line, "step %ld: valid NLL %.4f nats/byte, %.3f bits/byte", long(done), v.nll, v.nll / std::log(2.0));
  std::string text = line;
  if (v.gate_mass >= 0) text += ", gate mass " + std::to_string(v.gate_mass).substr(0, 5);
  progress.note(text);
}

}  // namespace

TrainResult train_model(const TrainOptions& options, const Corpus& corpus) {
  // Rank 0 alone validates and writes the log and the checkpoints.
  const Communicator& comm = options.communicator != nullptr ? *options.communicator : single_process();
  const TrainOptions o = rank_options(options, comm);
  std::unique_ptr<Trainable> model = make_trainable(o);
  const TrainFamily& family = train_family_named(o.arch);
  const CheckpointFiles files = family.files(o.out);
  const int T = model->seq_len();
  const TextSplit& train = corpus.split("train");
  const TextSplit& valid = corpus.split("valid");
  train.window_count(T);  // both splits must hold at least one window: fail before training
  valid.window_count(T);
  const std::string data_hash = train.content_hash();
  const Resumed resumed = o.resume ? load_checkpoint(o, files, *model) : Resumed{};

  const std::string log_path = o.log_path.empty() ? files.log : o.log_path;
  // A folder checkpoint is created if missing.
  if (family.checkpoint_is_folder) ensure_folder(o.out, "--out");
  else ensure_file_destination(o.out, "--out");
  std::ofstream log;
  if (comm.root()) {
    log.open(log_path, o.resume ? std::ios::app : std::ios::trunc);
    if (!log) throw Error(log_path + ": cannot open the training log for writing");
    log << start_record(o, *model, corpus, resumed.step, data_hash, comm.size()).dump() << "\n" << std::flush;
  }

  const int64_t first_step = resumed.step;
  const int64_t last_step = o.stop_after > 0 ? std::min(o.steps, first_step + o.stop_after) : o.steps;
  const int local_micro_batches = comm.size() > 1 ? 1 : o.grad_accum;
  std::vector<int32_t> inputs(size_t(o.batch) * T * local_micro_batches), targets(inputs.size());
  TrainResult result;
  Progress progress("train", last_step - first_step, "step");
  const auto start = std::chrono::steady_clock::now();
  double loss = 0;
  for (int64_t step = first_step; step < last_step; ++step) {
    draw_micro_batches(train, o, T, step, comm.size() > 1 ? comm.rank() : 0, local_micro_batches, inputs.data(), targets.data());
    const double lr = learning_rate(step, o.steps, o.warmup, o.lr, o.min_lr_ratio);
    StepStats stats;
    try {
      stats = model->step(inputs.data(), targets.data(), local_micro_batches, lr, comm);
    } catch (const Error& e) {
      throw Error("step " + std::to_string(step) + ": " + e.what());
    }
    loss = stats.loss;

    const int64_t done = step + 1;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double tokens_per_s = double(done - first_step) * o.batch * o.grad_accum * T / elapsed;
    char detail[96];
    std::snprintf(detail, sizeof detail, "loss %.4f  %.0f tok/s", loss, tokens_per_s);
    if (o.progress) progress.update(done - first_step, detail);
    if (!comm.root()) continue;  // the rest of the step (log, validation, checkpoint) is rank 0's
    if (done % o.log_every == 0 || done == last_step) {
      nlohmann::ordered_json j{{"type", "step"}, {"step", done}, {"loss", loss}, {"lr", lr}, {"grad_norm", stats.grad_norm},
                               {"tokens_per_s", tokens_per_s}, {"elapsed_s", elapsed}};
      log << j.dump() << "\n" << std::flush;
    }
    if ((o.eval_every > 0 && done % o.eval_every == 0) || done == o.steps) validate_and_log(*model, valid, o, T, done, log, progress, result);
    if ((o.checkpoint_every > 0 && done % o.checkpoint_every == 0) || done == last_step)
      save_checkpoint(o, files, *model, done, data_hash);
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
  if (last_step == o.steps) run_later_phases(o, files, *model, train, valid, resumed.phases_done, data_hash, log, comm);
  if (!comm.root()) return result;
  nlohmann::ordered_json end{{"type", "end"}, {"step", last_step}, {"loss", loss}, {"seconds", result.seconds},
                             {"tokens_per_s", result.tokens_per_second}};
  log << end.dump() << "\n" << std::flush;
  return result;
}

}  // namespace fca
