// `fca report`: one self-contained HTML file (inline SVG, no scripts, no network) and a Markdown
// summary, built only from result files: audit.json, exec.json, aggregate.json, eval JSON and
// training logs. Never loads a model.
#pragma once
#include "core/json.h"
#include <map>
#include <string>
#include <vector>

namespace fca {

struct ReportInputs {
  std::vector<std::string> audits, execs, aggregates, evals, train_logs;
  std::string paper;  // a paper.json (fca paper): its section is added; "" for none
  std::string title = "Frozen-Controller Audit report";
};

// Validated documents: schema versions and every field the report uses are checked on load; an
// error names the file and the field.
struct ReportData {
  struct Named {
    std::string path;
    nlohmann::json doc;
  };
  std::vector<Named> audits, execs, aggregates, evals;
  struct TrainLog {
    std::string path, label;
    std::vector<std::pair<double, double>> loss, valid;  // (step, value)
  };
  std::vector<TrainLog> train_logs;
  nlohmann::json paper;  // fca-paper-v1, or null
  std::string title;
  // A short, distinct label per checkpoint (model sha256 -> label), from its path: the file or
  // folder name without ".safetensors" ("featuregate-s1" in a study), extended by parent folders
  // until every checkpoint among the inputs has its own. Tables, figures and cards name
  // checkpoints by it, so two seeds of one variant never share a label.
  std::map<std::string, std::string> labels;
  // The label of a checkpoint, or `fallback` when the inputs do not know it.
  std::string label(const std::string& sha256, const std::string& fallback = "?") const;
};

// The labels path_labels gives distinct paths: the shortest path suffixes (at least the last
// component, ".safetensors" removed) that tell them apart. Equal paths get equal labels.
std::vector<std::string> path_labels(const std::vector<std::string>& paths);

// One training log (fca-train JSONL): its label from the start record (written by the trainer from
// the family's ModelFamily::label, never guessed here), the loss and validation curves.
ReportData::TrainLog read_train_log(const std::string& path);
ReportData load_report_data(const ReportInputs& inputs);

// The three-claim verdict lines of one model: one card per configuration. With an aggregate over
// several checkpoints of the configuration among the inputs, its audits make one card, claims 1 and
// 2 come from the aggregate (checkpoint-level CIs, the paper's primary analysis) and `basis` says so
// and lists the per-checkpoint audits; otherwise they come from the one audit. Claim 3 comes from
// whichever of the card's checkpoints an exec.json timed, named in the text.
struct Verdicts {
  std::string model, family, sha256;
  std::string variation, dependence, execution;
  std::string basis;                     // "Checkpoint level: ..." or "One checkpoint: ..."
  std::string warning;                   // shown first on the card: a check the audit was allowed to skip
  std::vector<std::string> checkpoints;  // the audits behind an aggregate verdict
  bool varies = false, needs_dynamic = false, saves_compute = false;
};
std::vector<Verdicts> compute_verdicts(const ReportData& data);

// Figures (SVG strings); empty when the inputs hold nothing to draw.

std::string figure_penalties(const ReportData& data);
std::string figure_retention(const ReportData& data);
std::string figure_variance(const ReportData& data);
std::string figure_profiles(const ReportData& data);
std::string figure_latency(const ReportData& data);
std::string figure_depth_tradeoff(const ReportData& data);
std::string figure_training(const ReportData& data);

std::string report_html(const ReportData& data);
std::string report_markdown(const ReportData& data);

// The paper reproduction (a fca-paper-v1 document, study/paper.h) as a Markdown page, a standalone
// HTML page and the section report.html carries: every figure with the paper's value beside it.
std::string paper_markdown(const nlohmann::ordered_json& paper);
std::string paper_page_html(const nlohmann::ordered_json& paper);
std::string paper_section_html(const nlohmann::json& paper);

}  // namespace fca
