// The paper's own values (configs/paper-values.json, schema fca-paper-values-v2): for each figure or
// claim id of the page (`<row>.<corpus key>`), the paper's readings, each in its setting:
//   {"setting": "76M, WT103 (7 seeds)", "number": 0.000951}        a number the paper prints
//   {"setting": ..., "text": "3.0842 ± 0.0061 (n 7)"}              a text the paper prints
//   {"not_reported": "the paper audits on WT103 only"}             the paper has no value here
// with optional "derived" (how a value not printed by the paper follows from printed ones) and
// "note". docs/paper.md, "The paper's values".
#pragma once
#include <set>
#include <string>

#include "core/json.h"

namespace fca {

class PaperValues {
 public:
  // Reads and checks the file (schema, every entry's form); throws Error naming the file and entry.
  explicit PaperValues(const std::string& path);

  // The readings of `id` (a JSON array, as written into paper.json); throws Error when the file has
  // no entry for it, so no figure is printed without the paper's column. Marks the entry as printed.
  const nlohmann::json& readings(const std::string& id);
  // Whether any reading of `id` is a value (a number or a text), not "not reported".
  bool reported(const std::string& id);
  // Throws Error naming the first entry that no figure or claim printed (a misspelt id).
  void check_all_printed() const;

  const std::string& path() const { return path_; }
  const nlohmann::json& document() const { return doc_; }

 private:
  std::string path_;
  nlohmann::json doc_;
  std::set<std::string> printed_;
};

// The page's text of a cell's readings: "0.000951 [76M, WT103 (7 seeds)]; 0.000891 [504M, ...]",
// "not reported by the paper (the paper audits on WT103 only)". Numbers print with up to 6
// significant digits (as %.6g), so the page shows what the paper printed. scripts/check_paper.py
// renders the same text independently.
std::string paper_readings_text(const nlohmann::json& readings);

}  // namespace fca
