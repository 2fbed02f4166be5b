// The result files of one corpus's study folder, read for the paper's figures (never a model):
// <variant>-s<seed>.eval-test.json, <variant>-aggregate.json (trained variants, intervals over
// checkpoints), <variant>-audit/audit.json (an untrained arm: one checkpoint, paired-window
// intervals) and exec/exec.json. Internal to src/study (paper_figures.cpp, paper_claims.cpp).
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/json.h"
#include "study/paper.h"

namespace fca {

std::string paper_fmt(const char* format, double a, double b = 0, double c = 0, double d = 0);

// One measured cell: its text, its central value (null when undefined) and the raw figures a check
// recomputes verdicts from (per checkpoint values, interval, counts), written into paper.json.
struct Measured {
  std::string text;
  nlohmann::ordered_json value;
  nlohmann::ordered_json data = nlohmann::ordered_json::object();
};

// A figure of a variant in one form for both kinds of arm: {mean, ci95, values (per checkpoint),
// basis, note}; mean null when undefined (note says why).
struct Figure {
  nlohmann::json mean, ci95, values, note, holm_p;
  std::string basis;
  bool defined() const { return mean.is_number(); }
};

class StudyFigures {
 public:
  StudyFigures(const PaperConfig& c, std::string dir) : c_(c), dir_(std::move(dir)) {}

  const StudyVariant& variant(const std::string& name) const;
  bool has_variant(const std::string& name) const;
  // Per checkpoint (per seed; one for an untrained arm), a field of its eval-test.json.
  std::vector<double> per_seed(const std::string& variant, const std::string& field) const;
  Measured mean_sd(const std::string& variant, const std::string& field, const char* format) const;
  // Seeds where variant a's Byte-PPL is below b's (same seed): {k, n} in data.
  Measured wins(const std::string& a, const std::string& b) const;

  // delta_nll.<condition>, retention.<profile>, factor_effect.<e>, variance_share.<k>.
  Figure figure(const std::string& variant, const std::string& name) const;
  // mean [95% CI], scaled (100 for per cent), or the figure's reason it is undefined.
  Measured interval(const std::string& variant, const std::string& name, double scale = 1, const char* unit = "") const;
  // A condition's penalty: the interval, the mean MC SE of its audits and the checkpoints where it is positive.
  Measured penalty(const std::string& variant, const std::string& condition) const;
  // Every audit.json of a variant (one per seed; one for an untrained arm).
  std::vector<nlohmann::json> audits(const std::string& variant) const;

  // exec.json's model entry of a variant (first seed's checkpoint, or the untrained arm's path).
  const nlohmann::json& exec_model(const std::string& variant) const;
  bool has_exec_model(const std::string& variant) const;
  const nlohmann::json& live_mode(const std::string& variant) const;
  const nlohmann::json& exec() const;
  const std::string& dir() const { return dir_; }
  const PaperConfig& config() const { return c_; }

 private:
  const nlohmann::json& aggregate(const std::string& variant) const;
  const PaperConfig& c_;
  std::string dir_;
  mutable std::map<std::string, nlohmann::json> files_;
};

// The page's sections and claims over the corpora's studies (paper_figures.cpp, paper_claims.cpp).
struct RowSpec {
  std::string id, label;
  std::function<Measured(const StudyFigures&)> cell;
};
struct SectionSpec {
  std::string id, title, note;
  std::vector<RowSpec> rows;
};
std::vector<SectionSpec> paper_sections(const PaperConfig& c);

// A claim's criterion on one corpus: whether it holds (null: not comparable), and what fca measured.
struct ClaimOutcome {
  nlohmann::json holds;  // true, false, or null (not comparable)
  std::string finding;
  nlohmann::ordered_json data = nlohmann::ordered_json::object();
};
struct ClaimSpec {
  std::string id, statement, source, criterion;
  std::function<ClaimOutcome(const StudyFigures&)> decide;
};
std::vector<ClaimSpec> paper_claims();

}  // namespace fca
