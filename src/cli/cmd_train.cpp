// fca train: trains a byte-level model of any family in the train layer's family table
// (train/train_family.h); the family-specific flags come from that table.
#include <cstdio>
#include <memory>

#include "cli/common.h"
#include "core/communicator.h"
#include "core/error.h"
#include "data/corpus.h"
#include "train/train_family.h"
#include "train/trainer.h"

namespace fca::cli {

void add_train_command(CLI::App& app) {
  struct Flags {
    FamilyFlags family;
    TrainOptions train;
    std::string data;
    int threads = 0;
    bool no_progress = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("train", "Train a byte-level model of any trainable family (--arch)");
  TrainOptions& t = f->train;
  f->family.add_to(*cmd, "Model family");
  cmd->add_option("--batch", t.batch, "Windows per micro-batch")->check(whole_number(1))->capture_default_str();
  cmd->add_option("--grad-accum", t.grad_accum, "Micro-batches per optimizer step")
      ->check(whole_number(1))
      ->capture_default_str();
  cmd->add_option("--steps", t.steps, "Optimizer steps of the whole schedule")->check(whole_number(1))->capture_default_str();
  cmd->add_option("--lr", t.lr, "Peak learning rate")->check(positive_number)->capture_default_str();
  cmd->add_option("--warmup", t.warmup, "Linear warm-up steps")->check(whole_number(0))->capture_default_str();
  cmd->add_option("--min-lr-ratio", t.min_lr_ratio, "Cosine decay floor as a fraction of the peak")
      ->check(number_in(0, 1))
      ->capture_default_str();
  cmd->add_option("--clip", t.clip, "Global gradient-norm clip (0 = off)")->check(non_negative_number)->capture_default_str();
  cmd->add_option("--weight-decay", t.adamw.weight_decay, "AdamW weight decay on 2-D weights")
      ->check(non_negative_number)
      ->capture_default_str();
  cmd->add_option("--seed", t.seed, "Seed of initialisation and batches")->check(unsigned_integer)->capture_default_str();
  cmd->add_option("--data", f->data, "Data folder (train/valid/test .txt or wiki.*.raw); default: the nlp-corpus");
  cmd->add_option("--eval-every", t.eval_every, "Validate every N steps (0 = at the end only)")
      ->check(whole_number(0, "0 = at the end only"))
      ->capture_default_str();
  cmd->add_option("--eval-windows", t.eval_windows, "Validation windows (evenly spaced)")
      ->check(whole_number(1))
      ->capture_default_str();
  cmd->add_option("--checkpoint-every", t.checkpoint_every, "Checkpoint every N steps (0 = at the end only)")
      ->check(whole_number(0, "0 = at the end only"))
      ->capture_default_str();
  cmd->add_option("--log-every", t.log_every, "Write a log line every N steps")->check(whole_number(1))->capture_default_str();
  cmd->add_option("--stop-after", t.stop_after,
                  "Stop (with a checkpoint) after N steps of this run; the schedule still spans --steps")
      ->check(whole_number(0, "0 = run all"))
      ->capture_default_str();
  cmd->add_option("--out", t.out, "Checkpoint to write (.safetensors)")->required();
  cmd->add_option("--log", t.log_path, "JSON-lines training log (default: <out>.log.jsonl)");
  cmd->add_flag("--resume", t.resume, "Continue from --out and its .train-state.safetensors");
  cmd->add_flag("--no-progress", f->no_progress, "No progress bar");
  add_threads_flag(*cmd, f->threads);
  cmd->callback(naming_batch(t.batch, [f, cmd] {
    TrainOptions options = f->train;
    // Flags are checked before the corpus is looked for, so a bad flag is named first.
    options.arch = f->family.arch;
    options.shape = f->family.shape;
    options.settings = f->family.settings(*cmd);
    apply_threads(f->threads);
    options.progress = !f->no_progress;
    Corpus corpus(resolve_data_dir(f->data));
    options.communicator = &world();  // mpirun: data parallel, one micro-batch per rank
    const TrainResult r = train_model(options, corpus);
    if (!world().root()) return;
    std::printf("trained %ld steps in %.1f s (%.0f tokens/s): final loss %.4f, valid NLL %.4f nats/byte\n",
                long(r.steps_done), r.seconds, r.tokens_per_second, r.final_loss, r.final_valid_nll);
    std::printf("checkpoint: %s\n", options.out.c_str());
  }));
}

}  // namespace fca::cli
