// Training (any Trainable model family): AdamW, warm-up + cosine schedule, global-norm clipping, gradient
// accumulation, seeded batches of random windows, periodic validation, checkpoint and resume.
//
// Determinism: the batch of step s, micro-batch k is drawn from Rng(derive_seed(seed, s, k)), the
// learning rate is a function of s, and every kernel reduces in a fixed order, so the same seed,
// data and thread count give bit-identical checkpoints, and a resumed run continues exactly as an
// uninterrupted one would.
#pragma once
#include <cstdint>
#include <string>

#include "core/communicator.h"
#include "data/corpus.h"
#include <memory>

#include "core/json.h"
#include "train/adamw.h"
#include "train/train_family.h"
#include "train/trainable.h"

namespace fca {

struct TrainOptions {
  std::string arch;            // the family (train_family.h): a name in train_families()
  ModelShape shape;            // L, D, H, T
  nlohmann::json settings = nlohmann::json::object();  // the family's own settings (resolve_settings)
  int batch = 8;            // windows per micro-batch
  int grad_accum = 1;       // micro-batches per optimizer step
  int64_t steps = 1000;     // optimizer steps in the whole schedule
  double lr = 1e-3;         // peak learning rate
  int64_t warmup = 100;     // linear warm-up steps
  double min_lr_ratio = 0.1;  // cosine decays to this fraction of the peak
  double clip = 1.0;        // global gradient-norm clip (0 = off)
  AdamWOptions adamw;
  uint64_t seed = 0;
  int64_t eval_every = 200;  // validation every N steps (0 = only at the end)
  int64_t eval_windows = 64;  // evenly spaced validation windows
  int64_t checkpoint_every = 0;  // 0 = only at the end
  int64_t log_every = 10;
  int64_t stop_after = 0;    // stop (checkpointed) after this many steps of the schedule; 0 = run all
  std::string out;           // checkpoint: a .safetensors file or a folder (TrainFamily::checkpoint_is_folder)
  std::string log_path;      // JSON-lines log; default: the family's (CheckpointFiles::log)
  bool resume = false;       // continue from <out> and its training state
  bool progress = true;
  // The ranks of a data-parallel run (core/communicator.h); null: this process alone.
  const Communicator* communicator = nullptr;
};

struct TrainResult {
  int64_t steps_done = 0;
  double final_loss = 0;
  double final_valid_nll = 0;
  double tokens_per_second = 0;
  double seconds = 0;
};

// A fresh model of the run's family, shape and settings (errors name the setting or shape field).
std::unique_ptr<Trainable> make_trainable(const TrainOptions& options);

// Trains from the seed (or resumes); checkpoints to options.out.
TrainResult train_model(const TrainOptions& options, const Corpus& corpus);

}  // namespace fca
