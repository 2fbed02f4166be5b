#include "study/torch_engine.h"

#include <cstdio>
#include <initializer_list>
#include <utility>

#include "core/child_process.h"
#include "core/error.h"
#include "train/train_family.h"

namespace fca {
namespace {

std::string number(double x) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", x);  // exact: the trainer's config holds the same double
  return text;
}

// A resolved setting's value as one word of the command line.
std::string setting_word(const nlohmann::json& value) {
  if (value.is_string()) return shell_word(value.get<std::string>());
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_number_integer()) return std::to_string(value.get<int64_t>());
  return number(value.get<double>());
}

}  // namespace

bool StudyEngine::handles(const std::string& arch) const {
  return torch() && !train_family_named(arch).torch_arch.empty();
}

void check_study_engine(const StudyEngine& engine, const std::string& where) {
  if (engine.name != "native" && engine.name != "torch")
    throw Error(where + ": engine \"" + engine.name + "\" is not one of native, torch");
  if (engine.gpus < 0) throw Error(where + ": --gpus " + std::to_string(engine.gpus) + " is negative");
  if (engine.gpus > 0 && !engine.torch()) throw Error(where + ": --gpus is for --engine torch");
}

std::string torch_train_command(const StudyEngine& engine, const TrainOptions& o, const std::string& data_dir) {
  const TrainFamily& family = train_family_named(o.arch);
  if (!engine.handles(o.arch)) throw Error("the torch engine has no model of the " + o.arch + " family (TrainFamily::torch_arch)");
  // torchrun's --redirects 1 --tee 1: Debian 12's torch 1.13 on Python 3.11 cannot parse its own
  // default (0), and the workers' output still reaches the terminal. After a worker fails, torchrun
  // starts them all again (3 times at most), and --resume continues from the last checkpoint.
  const std::string launcher =
      engine.gpus > 0 ? " -m torch.distributed.run --standalone --nproc_per_node " + std::to_string(engine.gpus) +
                            " --max_restarts 3 --redirects 1 --tee 1 --module fca_torch.train"
                      : " -m fca_torch.train";
  std::string c = shell_word(engine.python) + launcher;
  auto arg = [&c](const std::string& flag, const std::string& value) {
    c.append(" ").append(flag).append(" ").append(value);
  };
  arg("--arch", shell_word(family.torch_arch));
  arg("--layers", std::to_string(o.shape.layers));
  arg("--dim", std::to_string(o.shape.dim));
  arg("--heads", std::to_string(o.shape.heads));
  arg("--seq", std::to_string(o.shape.seq));
  for (const FamilySetting& s : family.settings) arg(setting_flag(s.key), setting_word(o.settings.at(s.key)));
  for (const auto& [flag, value] : std::initializer_list<std::pair<const char*, std::string>>{
           {"--batch", std::to_string(o.batch)},
           {"--grad-accum", std::to_string(o.grad_accum)},
           {"--steps", std::to_string(o.steps)},
           {"--lr", number(o.lr)},
           {"--warmup", std::to_string(o.warmup)},
           {"--min-lr-ratio", number(o.min_lr_ratio)},
           {"--clip", number(o.clip)},
           {"--weight-decay", number(o.adamw.weight_decay)},
           {"--seed", std::to_string(o.seed)},
           {"--eval-every", std::to_string(o.eval_every)},
           {"--eval-windows", std::to_string(o.eval_windows)},
           {"--checkpoint-every", std::to_string(o.checkpoint_every)},
           {"--log-every", std::to_string(o.log_every)},
           {"--data", shell_word(data_dir)},
           {"--out", shell_word(o.out)}})
    arg(flag, value);
  if (o.stop_after > 0) arg("--stop-after", std::to_string(o.stop_after));
  if (!o.log_path.empty()) arg("--log", shell_word(o.log_path));
  if (o.resume) c += " --resume";
  if (!o.progress) c += " --no-progress";
  return c;
}

void train_with_torch(const StudyEngine& engine, const TrainOptions& o, const std::string& data_dir) {
  const std::string command = torch_train_command(engine, o, data_dir);
  const std::string ended = run_to_exit(command);
  if (!ended.empty())
    throw Error("the torch engine's trainer " + ended + " (`" + command +
                "`; docs/torch-engine.md: its interpreter must import torch and fca_torch, e.g. PYTHONPATH=python)");
}

std::string torch_serve_command(const StudyEngine& engine, const std::string& path) {
  return shell_word(engine.python) + " -m fca_torch.serve --model " + shell_word(path);
}

std::string torch_exec_command(const StudyEngine& engine, const std::string& path) {
  return torch_serve_command(engine, path) + " --reference same-shape-dense";
}

}  // namespace fca
