// fca train: trains a gated byte-level transformer (spec: gated-transformer.md).
#include <cstdio>
#include <memory>

#include "cli/common.h"
#include "core/communicator.h"
#include "core/error.h"
#include "data/corpus.h"
#include "train/trainer.h"

namespace fca::cli {

void add_train_command(CLI::App& app) {
  struct Flags {
    ModelShapeFlags shape;
    TrainOptions train;
    std::string data;
    int threads = 0;
    bool no_progress = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("train", "Train a byte-level model: the gated family, or a MUDD model (--arch mudd)");
  f->shape.add_to(*cmd);
  cmd->add_option("--arch", f->train.arch, "Architecture: gated (the --gate family), mudd (dynamic dense connections; "
                                           "--out is then a folder), moe (top-k mixture of experts) or mod "
                                           "(Mixture-of-Depths)")
      ->check(CLI::IsMember({"gated", "mudd", "moe", "mod"}))
      ->capture_default_str();
  TrainOptions& t = f->train;
  // Routed families (conditional-computation spec); range checks happen in the configs' validate().
  cmd->add_option("--experts", t.moe.n_expert, "moe: number of experts E")->capture_default_str();
  cmd->add_option("--top-k", t.moe.top_k, "moe: experts per token k (1 <= k <= E)")->capture_default_str();
  cmd->add_option("--expert-hidden", t.moe.expert_hidden, "moe: expert width F (0 = 4D/k)")->capture_default_str();
  cmd->add_option("--aux-loss", t.moe.aux_loss, "moe: weight alpha of the load-balancing term")->capture_default_str();
  cmd->add_option("--capacity", t.mod.capacity, "mod: share c of each window's tokens a routed block runs, in (0, 1]")
      ->capture_default_str();
  cmd->add_option("--routed-every", t.mod.routed_every, "mod: blocks routed_every-1, 2 routed_every-1, ... are routed")
      ->capture_default_str();
  cmd->add_option("--batch", t.batch, "Windows per micro-batch")->check(positive_number)->capture_default_str();
  cmd->add_option("--grad-accum", t.grad_accum, "Micro-batches per optimizer step")
      ->check(positive_number)
      ->capture_default_str();
  cmd->add_option("--steps", t.steps, "Optimizer steps of the whole schedule")->check(positive_number)->capture_default_str();
  cmd->add_option("--lr", t.lr, "Peak learning rate")->check(positive_number)->capture_default_str();
  cmd->add_option("--warmup", t.warmup, "Linear warm-up steps")->check(non_negative_number)->capture_default_str();
  cmd->add_option("--min-lr-ratio", t.min_lr_ratio, "Cosine decay floor as a fraction of the peak")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--clip", t.clip, "Global gradient-norm clip (0 = off)")->check(non_negative_number)->capture_default_str();
  cmd->add_option("--weight-decay", t.adamw.weight_decay, "AdamW weight decay on 2-D weights")
      ->check(non_negative_number)
      ->capture_default_str();
  cmd->add_option("--seed", t.seed, "Seed of initialisation and batches")->check(unsigned_integer)->capture_default_str();
  cmd->add_option("--data", f->data, "Data folder (train/valid/test .txt or wiki.*.raw); default: the nlp-corpus");
  cmd->add_option("--eval-every", t.eval_every, "Validate every N steps (0 = at the end only)")
      ->check(non_negative_number)
      ->capture_default_str();
  cmd->add_option("--eval-windows", t.eval_windows, "Validation windows (evenly spaced)")
      ->check(positive_number)
      ->capture_default_str();
  cmd->add_option("--checkpoint-every", t.checkpoint_every, "Checkpoint every N steps (0 = at the end only)")
      ->check(non_negative_number)
      ->capture_default_str();
  cmd->add_option("--log-every", t.log_every, "Write a log line every N steps")->check(positive_number)->capture_default_str();
  cmd->add_option("--stop-after", t.stop_after,
                  "Stop (with a checkpoint) after N steps of this run; the schedule still spans --steps")
      ->check(non_negative_number)
      ->capture_default_str();
  cmd->add_option("--out", t.out, "Checkpoint to write (.safetensors)")->required();
  cmd->add_option("--log", t.log_path, "JSON-lines training log (default: <out>.log.jsonl)");
  cmd->add_flag("--resume", t.resume, "Continue from --out and its .train-state.safetensors");
  cmd->add_flag("--no-progress", f->no_progress, "No progress bar");
  add_threads_flag(*cmd, f->threads);
  cmd->callback([f, cmd] {
    for (const char* flag : {"--experts", "--top-k", "--expert-hidden", "--aux-loss"})
      if (cmd->count(flag) > 0 && f->train.arch != "moe") throw Error(std::string(flag) + " applies to --arch moe only");
    for (const char* flag : {"--capacity", "--routed-every"})
      if (cmd->count(flag) > 0 && f->train.arch != "mod") throw Error(std::string(flag) + " applies to --arch mod only");
    apply_threads(f->threads);
    TrainOptions options = f->train;
    options.config = f->shape.config();
    if (options.arch == "mudd") {
      // Byte-level MUDD (spec muddpythia.md section 11): vocab 256, intermediate 4D re-allocated per
      // layer, RoPE on a quarter of each head, the DA widths by the round64 rule.
      MuddConfig& m = options.mudd;
      m.n_layer = f->shape.layers;
      m.dim = f->shape.dim;
      m.n_head = f->shape.heads;
      m.head_dim = f->shape.dim / f->shape.heads;
      m.vocab_size = 256;
      m.block_size = f->shape.seq;
      m.intermediate_size = 4 * f->shape.dim;
      if (m.n_layer < 2) throw Error("--arch mudd needs --layers >= 2");
      if (m.rotary_dims() % 2 != 0 || m.rotary_dims() == 0)
        throw Error("--arch mudd: a quarter of the head width (" + std::to_string(m.head_dim) + "/4) must be a positive even number");
    }
    for (auto* shape : {&options.moe.n_layer, &options.mod.n_layer}) *shape = f->shape.layers;
    options.moe.d_model = options.mod.d_model = f->shape.dim;
    options.moe.n_head = options.mod.n_head = f->shape.heads;
    options.moe.seq_len = options.mod.seq_len = f->shape.seq;
    options.progress = !f->no_progress;
    // Flags are checked before the corpus is looked for, so a bad flag is named first.
    if (options.arch == "moe") options.moe.validate("flags");
    if (options.arch == "mod") options.mod.validate("flags");
    Corpus corpus(resolve_data_dir(f->data));
    options.communicator = &world();  // mpirun: data parallel, one micro-batch per rank
    const TrainResult r = train_model(options, corpus);
    if (!world().root()) return;
    std::printf("trained %ld steps in %.1f s (%.0f tokens/s): final loss %.4f, valid NLL %.4f nats/byte\n",
                long(r.steps_done), r.seconds, r.tokens_per_second, r.final_loss, r.final_valid_nll);
    std::printf("checkpoint: %s\n", options.out.c_str());
  });
}

}  // namespace fca::cli
