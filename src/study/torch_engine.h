// The PyTorch engine of a study (docs/torch-engine.md): fca_torch (python/fca_torch) trains the
// gated and MUDD variants (`python -m fca_torch.train`, under torchrun with one process per GPU when
// --gpus is given) and fca audits them through fca_torch's hooked adapter (`python -m
// fca_torch.serve`), each on the model's own device. Both write and read fca's checkpoints, so
// evaluation, aggregation, the report and the paper page are the native engine's.
#pragma once
#include <string>

#include "train/trainer.h"

namespace fca {

struct StudyEngine {
  std::string name = "native";     // "native" or "torch"
  std::string python = "python3";  // torch: an interpreter that imports torch and fca_torch
  int gpus = 0;                    // torch: processes under torchrun, one per GPU (0: one process)
  bool torch() const { return name == "torch"; }
  // Whether this engine trains and audits variants of the trainable family `arch` itself: the torch
  // engine, for the families that name a model of it (TrainFamily::torch_arch).
  bool handles(const std::string& arch) const;
};

// Checks the engine's fields (a name other than native or torch, gpus < 0); `where` names them.
void check_study_engine(const StudyEngine& engine, const std::string& where);

// The fca_torch.train command line for `o` (fca train's options: the same schedule, windows, seed
// and files), reading the corpus folder `data_dir`.
std::string torch_train_command(const StudyEngine& engine, const TrainOptions& o, const std::string& data_dir);

// Trains `o` with fca_torch.train to its end; throws Error naming the command and how it ended.
void train_with_torch(const StudyEngine& engine, const TrainOptions& o, const std::string& data_dir);

// The adapter command that serves checkpoint `path` (a gated file or a MUDD folder) to fca.
std::string torch_serve_command(const StudyEngine& engine, const std::string& path);
// The same for fca exec: with the Dense gated model of the same shape as its latency reference, the
// reference fca's native exec times every family against (dense_same_shape).
std::string torch_exec_command(const StudyEngine& engine, const std::string& path);

}  // namespace fca
