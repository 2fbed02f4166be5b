// fca eval and fca info: evaluation of a checkpoint on a split, and a checkpoint's summary.
#include <cmath>
#include <cstdio>
#include <memory>

#include "cli/common.h"
#include "ops/provenance.h"
#include "core/safetensors.h"
#include "core/sha256.h"
#include "data/corpus.h"
#include "core/file_io.h"
#include "models/registry.h"
#include "train/evaluate.h"

namespace fca::cli {

void add_eval_command(CLI::App& app) {
  struct Flags {
    std::string model, data, split = "test", out;
    int64_t windows = 0;
    int seq = 0, batch = 8, threads = 0;
    std::string precision = "fp32";
    bool no_progress = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("eval", "Evaluate a model: NLL, bits/byte, Byte-PPL, gate mass");
  cmd->add_option("--model", f->model, "Checkpoint of any installed family (`fca families`): a .safetensors file or a model folder")->required();
  cmd->add_option("--data", f->data, "Data folder; default: the nlp-corpus");
  cmd->add_option("--split", f->split, "Split to evaluate")->check(CLI::IsMember({"train", "valid", "test"}))->capture_default_str();
  cmd->add_option("--windows", f->windows, "Evenly spaced windows to evaluate (0 = all)")
      ->check(whole_number(0, "0 = all"))
      ->capture_default_str();
  cmd->add_option("--seq", f->seq, "Window length T (0 = the model's seq_len)")->check(whole_number(0, "0 = the model's seq_len"))->capture_default_str();
  cmd->add_option("--batch", f->batch, "Windows per forward pass")->check(whole_number(1))->capture_default_str();
  cmd->add_option("--out", f->out, "JSON result file (default: <model>.eval-<split>.json)");
  cmd->add_flag("--no-progress", f->no_progress, "No progress bar");
  add_threads_flag(*cmd, f->threads);
  add_precision_flag(*cmd, f->precision);
  cmd->callback(naming_batch(f->batch, [f] {
    apply_threads(f->threads);
    apply_precision(f->precision);
    if (!f->out.empty()) ensure_file_destination(f->out, "--out");
    Corpus corpus(resolve_data_dir(f->data));
    const TextSplit& split = corpus.split(f->split);
    const auto model = open_model(f->model, f->batch, f->seq > 0 ? f->seq : 1 << 20);
    const EvalResult r =
        evaluate_auditable(*model, split, f->seq > 0 ? f->seq : model->max_tokens(), f->windows, f->batch, !f->no_progress);
    const nlohmann::ordered_json config = nlohmann::json::parse(model->config_json());
    const std::string unit = model->vocab() == 256 ? "byte" : "token", model_hash = model->content_hash();
    const int T = r.seq_len;
    std::printf("%s on %s/%s: %zu windows of %d %ss\n", f->model.c_str(), corpus.dir().c_str(), f->split.c_str(),
                r.windows.size(), T, unit.c_str());
    std::printf("  NLL %.4f nats/%s   %.4f bits/%s   %s-PPL %.4f", r.nll, unit.c_str(), r.bits_per_byte, unit.c_str(),
                unit == "byte" ? "Byte" : "Token", r.byte_ppl);
    if (r.gate_mass >= 0) std::printf("   gate mass %.4f", r.gate_mass);
    std::printf("\n");
    auto prov = provenance_base();
    prov["model_sha256"] = model_hash;
    prov["data"] = {{"dir", corpus.dir()}, {"split_file", split.path()}, {"split_sha256", split.content_hash()}};
    const ModelFamily& family = family_of(f->model);
    const nlohmann::ordered_json j =
        eval_document({f->model, family.name, family.label(config), config, unit}, f->split, T, r, prov);
    const std::string out = f->out.empty() ? (is_directory(f->model) ? f->model + "/eval-" + f->split + ".json"
                                                                     : f->model + ".eval-" + f->split + ".json")
                                           : f->out;
    write_json_file(out, j);
    std::printf("  written: %s\n", out.c_str());
  }));
}

void add_info_command(CLI::App& app) {
  auto model_path = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("info", "Show a checkpoint's config, parameter count and gate kind");
  cmd->add_option("--model", *model_path, "Checkpoint of any installed family (`fca families`): a .safetensors file or a model folder")->required();
  cmd->callback([model_path] {
    const ModelFamily& family = family_of(*model_path);
    if (family.info) {
      std::printf("%s", family.info(*model_path).c_str());
      return;
    }
    const auto model = open_model(*model_path, 1, 1);  // full validation
    std::printf("model:      %s\n", model_path->c_str());
    std::printf("family:     %s (%s)\n", family.name.c_str(), model->description().c_str());
    std::printf("config:     %s\n", model->config_json().c_str());
    std::printf("parameters: %zu\n", model->parameter_count());
    std::printf("sha256:     %s\n", model->content_hash().c_str());
  });
}

}  // namespace fca::cli
