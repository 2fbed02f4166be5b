#include "study/study.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "audit/aggregate.h"
#include "audit/audit.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/provenance.h"
#include "core/progress.h"
#include "core/safetensors.h"
#include "exec/exec.h"
#include "models/registry.h"
#include "report/report.h"
#include "train/evaluate.h"
#include "train/trainer.h"

namespace fca {
namespace {

struct Variant {
  std::string name, arch, gate;
  std::string command;  // arch "external": the adapter command (a model fca does not implement)
  int experts = 8, top_k = 2;
  double capacity = 0.125;
  int layers = 4, dim = 128, heads = 4, seq = 128;
};

template <typename T>
T get(const nlohmann::json& j, const char* key, T fallback, const std::string& where) {
  if (!j.contains(key)) return fallback;
  try {
    return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(where + ": field '" + key + "' has the wrong type (" + j[key].dump() + ")");
  }
}

// Whether a checkpoint exists and finished the whole schedule.
bool trained(const std::string& weights_file, int64_t steps) {
  if (!file_exists(weights_file)) return false;
  const SafetensorsReader r(weights_file);
  const auto it = r.metadata().find("train_step");
  return it != r.metadata().end() && std::stoll(it->second) >= steps;
}

void write_json(const std::string& path, const nlohmann::ordered_json& j) {
  write_file_atomically(path, [&](std::ostream& out) { out << j.dump(2) << "\n"; });
}

}  // namespace

std::string run_study(const std::string& config_path, const std::string& out_arg, bool progress) {
  std::ifstream in(config_path);
  if (!in) throw Error(config_path + ": cannot open the study config");
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(config_path + ": not valid JSON (" + e.what() + ")");
  }
  const std::string out = !out_arg.empty() ? out_arg : get<std::string>(cfg, "out", "", config_path);
  if (out.empty()) throw Error(config_path + ": no 'out' folder (or pass --out)");
  const std::string data = get<std::string>(cfg, "data", "", config_path);
  const Corpus corpus(data.empty() ? default_corpus_dir() : data);
  if (!cfg.contains("variants") || !cfg["variants"].is_array() || cfg["variants"].empty())
    throw Error(config_path + ": field 'variants' is missing or empty");
  std::vector<Variant> variants;
  for (const auto& v : cfg["variants"]) {
    Variant x;
    x.name = get<std::string>(v, "name", "", config_path);
    x.arch = get<std::string>(v, "arch", "gated", config_path);
    x.gate = get<std::string>(v, "gate", "featuregate", config_path);
    x.layers = get<int>(v, "layers", 4, config_path);
    x.dim = get<int>(v, "dim", 128, config_path);
    x.heads = get<int>(v, "heads", 4, config_path);
    x.seq = get<int>(v, "seq", x.arch == "external" ? 0 : 128, config_path);  // external: 0 = the model's
    x.experts = get<int>(v, "experts", 8, config_path);  // arch moe
    x.top_k = get<int>(v, "top_k", 2, config_path);
    x.capacity = get<double>(v, "capacity", 0.125, config_path);  // arch mod
    x.command = get<std::string>(v, "command", "", config_path);  // arch external
    if (x.name.empty()) throw Error(config_path + ": a variant has no 'name'");
    if ((x.arch == "external") != !x.command.empty())
      throw Error(config_path + ": variant '" + x.name + "': " +
                  (x.command.empty() ? "arch \"external\" needs a 'command' (the adapter to start)"
                                     : "'command' belongs to arch \"external\" only"));
    variants.push_back(x);
  }
  const std::vector<uint64_t> seeds = get<std::vector<uint64_t>>(cfg, "seeds", {1}, config_path);
  const nlohmann::json train_cfg = cfg.value("train", nlohmann::json::object());
  const nlohmann::json audit_cfg = cfg.value("audit", nlohmann::json::object());
  const nlohmann::json exec_cfg = cfg.value("exec", nlohmann::json::object());
  std::filesystem::create_directories(out);

  int64_t total = 2;  // execution and report
  for (const auto& v : variants) total += v.arch == "external" ? 2 : 3 * int64_t(seeds.size()) + 1;
  int64_t done = 0;
  auto stage = [&](const std::string& what) {
    ++done;
    if (progress) std::fprintf(stderr, "[study %ld/%ld] %s\n", long(done), long(total), what.c_str());
  };
  ReportInputs report;
  report.title = get<std::string>(cfg, "title", "Frozen-Controller Audit study", config_path);
  std::vector<std::string> exec_models;
  // The study's audit settings for one model.
  auto audit_options = [&](const std::string& model_path, const std::string& out_dir) {
    AuditOptions a;
    a.model_path = model_path;
    a.eval_windows = get<int>(audit_cfg, "eval_windows", 128, config_path);
    a.calib_windows = get<int>(audit_cfg, "calib_windows", 128, config_path);
    a.reps = get<int>(audit_cfg, "reps", 5, config_path);
    a.bootstrap_resamples = get<int>(audit_cfg, "bootstrap", 2000, config_path);
    a.seed = get<uint64_t>(audit_cfg, "seed", 1, config_path);
    a.out_dir = out_dir;
    a.progress = progress;
    return a;
  };
  const double adapter_timeout = get<double>(audit_cfg, "external_timeout", 600.0, config_path);
  for (const auto& v : variants) {
    if (v.arch == "external") {
      // A model fca does not implement: nothing to train and no seeds; it is evaluated and audited
      // through its adapter, and its execution is not measured (exec times fca's own engine).
      const std::string stem = out + "/" + v.name;
      const std::string eval_path = stem + ".eval-test.json";
      if (!file_exists(eval_path)) {
        stage("evaluate " + v.name + " (external)");
        const auto m = open_external_model(v.command, adapter_timeout);
        const int T = v.seq > 0 ? v.seq : m->max_tokens();
        const EvalResult r = evaluate_auditable(*m, corpus.split("test"), T, get<int64_t>(cfg, "eval_windows", 256, config_path), 8, false);
        auto provenance = provenance_base();
        provenance["model_sha256"] = m->content_hash();
        write_json(eval_path, {{"schema", "fca-eval-v1"}, {"model", "external: " + v.command},
                               {"config", nlohmann::json::parse(m->config_json())}, {"split", "test"}, {"seq_len", T},
                               {"windows", r.windows.size()}, {"nll", r.nll}, {"bits_per_byte", r.bits_per_byte},
                               {"byte_ppl", r.byte_ppl}, {"gate_mass", nullptr}, {"provenance", provenance}});
      } else {
        stage("evaluate " + v.name + " (external): done before, skipped");
      }
      report.evals.push_back(eval_path);
      const std::string audit_dir = stem + "-audit";
      if (!file_exists(audit_dir + "/audit.json")) {
        stage("audit " + v.name + " (external)");
        AuditOptions a = audit_options("external: " + v.command, audit_dir);
        a.tokens = v.seq;
        run_audit(*open_external_model(v.command, adapter_timeout), corpus, a);
      } else {
        stage("audit " + v.name + " (external): done before, skipped");
      }
      report.audits.push_back(audit_dir + "/audit.json");
      continue;
    }
    std::vector<std::string> variant_audits;
    for (uint64_t seed : seeds) {
      const std::string stem = out + "/" + v.name + "-s" + std::to_string(seed);
      TrainOptions o;
      o.arch = v.arch;
      o.config.gate = parse_gate_kind(v.arch == "gated" ? v.gate : "dense");
      o.config.n_layer = v.layers;
      o.config.d_model = v.dim;
      o.config.n_head = v.heads;
      o.config.seq_len = v.seq;
      o.mudd.n_layer = v.layers;
      o.mudd.dim = v.dim;
      o.mudd.n_head = v.heads;
      o.mudd.head_dim = v.dim / v.heads;
      o.mudd.vocab_size = 256;
      o.mudd.block_size = v.seq;
      o.mudd.intermediate_size = 4 * v.dim;
      o.moe = {v.layers, v.dim, v.heads, v.seq, v.experts, v.top_k, 0, 0.01};
      o.mod = {v.layers, v.dim, v.heads, v.seq, v.capacity, 2};
      o.batch = get<int>(train_cfg, "batch", 16, config_path);
      o.steps = get<int64_t>(train_cfg, "steps", 600, config_path);
      o.lr = get<double>(train_cfg, "lr", 2e-3, config_path);
      o.warmup = get<int64_t>(train_cfg, "warmup", 30, config_path);
      o.eval_every = get<int64_t>(train_cfg, "eval_every", 200, config_path);
      o.eval_windows = get<int64_t>(train_cfg, "eval_windows", 32, config_path);
      o.checkpoint_every = get<int64_t>(train_cfg, "checkpoint_every", 200, config_path);
      o.seed = seed;
      o.out = v.arch == "mudd" ? stem : stem + ".safetensors";
      o.progress = progress;
      const std::string weights = v.arch == "mudd" ? stem + "/model.safetensors" : o.out;
      const std::string log = v.arch == "mudd" ? stem + "/train.log.jsonl" : o.out + ".log.jsonl";
      if (trained(weights, o.steps)) {
        stage("train " + v.name + " seed " + std::to_string(seed) + ": done before, skipped");
      } else {
        stage("train " + v.name + " seed " + std::to_string(seed));
        o.resume = file_exists(weights) && file_exists(v.arch == "mudd" ? stem + "/train-state.safetensors"
                                                                        : stem + ".train-state.safetensors");
        train_model(o, corpus);
      }
      report.train_logs.push_back(log);

      const std::string eval_path = stem + ".eval-test.json";
      if (!file_exists(eval_path)) {
        stage("evaluate " + v.name + " seed " + std::to_string(seed));
        const int64_t windows = get<int64_t>(cfg, "eval_windows", 256, config_path);
        EvalResult r;
        nlohmann::ordered_json config;
        if (v.arch == "gated") {  // the gated family also reports its gate mass
          const GatedModel<float> m = GatedModel<float>::load(o.out);
          r = evaluate_gated(m, corpus.split("test"), v.seq, windows, 8, false);
          config = nlohmann::json::parse(m.config().to_json());
        } else {
          const auto m = open_model(o.out, 8, v.seq);
          r = evaluate_auditable(*m, corpus.split("test"), v.seq, windows, 8, false);
          config = nlohmann::json::parse(m->config_json());
        }
        write_json(eval_path, {{"schema", "fca-eval-v1"}, {"model", o.out}, {"config", config}, {"split", "test"},
                               {"seq_len", v.seq}, {"windows", r.windows.size()}, {"nll", r.nll},
                               {"bits_per_byte", r.bits_per_byte}, {"byte_ppl", r.byte_ppl},
                               {"gate_mass", r.gate_mass >= 0 ? nlohmann::ordered_json(r.gate_mass) : nlohmann::ordered_json(nullptr)},
                               {"provenance", provenance_base()}});
      } else {
        stage("evaluate " + v.name + " seed " + std::to_string(seed) + ": done before, skipped");
      }
      report.evals.push_back(eval_path);

      const std::string audit_dir = stem + "-audit";
      if (!file_exists(audit_dir + "/audit.json")) {
        stage("audit " + v.name + " seed " + std::to_string(seed));
        const AuditOptions a = audit_options(o.out, audit_dir);
        run_audit(*open_model(o.out, a.batch, v.seq), corpus, a);
      } else {
        stage("audit " + v.name + " seed " + std::to_string(seed) + ": done before, skipped");
      }
      variant_audits.push_back(audit_dir + "/audit.json");
      if (seed == seeds.front()) exec_models.push_back(o.out);
    }
    if (variant_audits.size() >= 2) {
      stage("aggregate " + v.name + " over " + std::to_string(variant_audits.size()) + " seeds");
      const auto agg = aggregate_audits(variant_audits, get<int>(audit_cfg, "bootstrap", 2000, config_path), 1);
      write_json(out + "/" + v.name + "-aggregate.json", agg);
      report.aggregates.push_back(out + "/" + v.name + "-aggregate.json");
    } else {
      stage("aggregate " + v.name + ": one seed, nothing to aggregate");
    }
    // Audit the first seed only in the report's cards: other seeds enter through the aggregate.
    report.audits.push_back(variant_audits.front());
  }
  const std::string exec_dir = out + "/exec";
  if (!file_exists(exec_dir + "/exec.json")) {
    stage("measure execution of " + std::to_string(exec_models.size()) + " models");
    ExecOptions e;
    e.models = exec_models;
    e.runs = get<int>(exec_cfg, "runs", 20, config_path);
    e.warmup = get<int>(exec_cfg, "warmup", 3, config_path);
    e.batch = get<int>(exec_cfg, "batch", 8, config_path);
    e.skip_thresholds = get<std::vector<double>>(exec_cfg, "skip_thresholds", {}, config_path);
    e.eval_windows = get<int>(exec_cfg, "eval_windows", 64, config_path);
    e.calib_windows = get<int>(exec_cfg, "calib_windows", 64, config_path);
    e.out_dir = exec_dir;
    e.progress = false;
    run_exec(corpus, e);
  } else {
    stage("measure execution: done before, skipped");
  }
  report.execs.push_back(exec_dir + "/exec.json");
  stage("report");
  const ReportData d = load_report_data(report);
  const std::string html_path = out + "/report.html";
  write_file_atomically(html_path, [&](std::ostream& s) { s << report_html(d); });
  write_file_atomically(out + "/report.md", [&](std::ostream& s) { s << report_markdown(d); });
  return html_path;
}

}  // namespace fca
