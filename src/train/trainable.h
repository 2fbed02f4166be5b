// What the training loop (trainer.cpp) needs from a model of any family: one optimizer step,
// validation, saving and loading (the checkpoint's file names are the family's, train_family.h).
// The loop itself (data, schedule, logging, checkpoints, resume) is written once.
#pragma once
#include <cstdint>
#include <map>
#include "core/json.h"
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/error.h"
#include "data/corpus.h"
#include "models/base/tensor_slot.h"
#include "train/adamw.h"

namespace fca {

struct StepStats {
  double loss;       // mean over the step's micro-batches
  double grad_norm;  // before clipping
};

struct ValidStats {
  double nll = 0;         // nats per token (per byte for byte-level models)
  double gate_mass = -1;  // mean gate (gated family); -1 where the model has no gates
  int64_t windows = 0;
};

// A training phase after the main steps (the exit family fits its classifiers on the frozen trunk):
// its steps, its learning rate (cosine from lr to min_lr_ratio * lr, no warm-up) and its data
// stream (batches drawn as the main phase's, from seed + seed_offset).
struct TrainPhase {
  std::string name;  // "exit_heads": the training log's "phase"
  int64_t steps = 0;
  double lr = 0, min_lr_ratio = 1;
  uint64_t seed_offset = 0;
};

class Trainable {
 public:
  virtual ~Trainable() = default;
  virtual nlohmann::ordered_json config_json() const = 0;
  virtual int seq_len() const = 0;
  virtual size_t parameter_count() const = 0;
  virtual const std::vector<TensorSlot>& layout() const = 0;
  virtual AdamW& optimizer() = 0;
  // inputs/targets [micro_batches, batch, T]: forward, backward, clipping, AdamW at rate lr; over
  // the ranks of `comm`, each with its own micro-batch (train_step.h).
  virtual StepStats step(const int32_t* inputs, const int32_t* targets, int micro_batches, double lr,
                         const Communicator& comm) = 0;
  virtual ValidStats validate(const TextSplit& valid, int64_t windows, int batch) = 0;
  // The phases that follow the main steps, in order (none for most families).
  virtual std::vector<TrainPhase> later_phases() const { return {}; }
  // One step of later phase `phase` on one micro-batch inputs/targets [batch, T] at rate lr.
  virtual StepStats phase_step(size_t phase, const int32_t* /*inputs*/, const int32_t* /*targets*/, double /*lr*/) {
    throw Error("this model has no training phase " + std::to_string(phase));
  }
  // Writes the checkpoint `out` (train_family.h: CheckpointFiles).
  virtual void save(const std::string& out, const std::map<std::string, std::string>& metadata) const = 0;
  virtual void load(const std::string& out) = 0;  // replaces the weights; refuses another config
  virtual size_t run_state_bytes() const = 0;
};

}  // namespace fca
