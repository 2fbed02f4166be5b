// paper.json (fca-paper-v2): every section's cells, measured per corpus, beside the paper's readings
// of the same id, and the claims with their verdicts. A figure without an entry in the values file,
// or an entry no figure prints, is an error, so the page and the file cannot drift apart.
#include <fstream>

#include "core/error.h"
#include "core/sha256.h"
#include "ops/provenance.h"
#include "study/paper_sources.h"
#include "study/paper_values.h"

namespace fca {
namespace {

nlohmann::ordered_json paper_cell(PaperValues& values, const std::string& id) {
  const nlohmann::json& r = values.readings(id);
  return {{"readings", r}, {"text", paper_readings_text(r)}, {"reported", values.reported(id)}};
}

// A claim on one corpus: a verdict on the paper where the paper makes it for this corpus's paper
// key; elsewhere an extension that says what fca finds.
nlohmann::ordered_json claim_json(const ClaimSpec& k, const ClaimOutcome& o, const PaperCorpus& corpus, PaperValues& values) {
  const std::string id = k.id + "." + corpus.paper_key;
  const nlohmann::ordered_json paper = paper_cell(values, id);
  const bool made = paper["reported"].get<bool>();
  std::string verdict;
  if (o.holds.is_null()) verdict = "not comparable";
  else if (made) verdict = o.holds.get<bool>() ? "reproduces" : "does not reproduce";
  else verdict = "extension";
  std::string reason = o.finding;
  if (!made) {
    const std::string where = values.readings(id)[0].value("not_reported", std::string("the paper does not make this claim here"));
    reason = where + "; on " + corpus.name + " fca finds: " + o.finding + " (" +
             (o.holds.is_null() ? "not comparable" : o.holds.get<bool>() ? "the criterion holds" : "the criterion does not hold") + ")";
  }
  return {{"id", id},       {"claim", k.statement},  {"source", k.source}, {"criterion", k.criterion}, {"corpus", corpus.name},
          {"paper_key", corpus.paper_key}, {"made_by_paper", made}, {"holds", o.holds}, {"verdict", verdict}, {"reason", reason},
          {"paper", paper}};
}

}  // namespace

nlohmann::ordered_json paper_figures(const PaperConfig& c, const std::string& out) {
  PaperValues values(c.values);
  std::vector<StudyFigures> studies;
  for (const PaperCorpus& k : c.corpora) studies.emplace_back(c, out + "/" + k.name);

  nlohmann::ordered_json p;
  p["schema"] = "fca-paper-v2";
  p["title"] = c.title;
  p["paper"] = values.document()["paper"];
  p["paper_values"] = {{"file", c.values}, {"sha256", sha256_file(c.values)}, {"settings", values.document().value("settings", nlohmann::json::object())}};
  p["corpora"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < c.corpora.size(); ++i)
    p["corpora"].push_back({{"name", c.corpora[i].name}, {"data", c.corpora[i].data}, {"stands_in_for", c.corpora[i].stands_in_for},
                            {"paper_key", c.corpora[i].paper_key}, {"study", studies[i].dir()}});
  p["seeds"] = c.study.seeds;
  const StudyVariant& mudd = studies.front().variant("mudd");
  p["mudd_arm"] = mudd.trained() ? nlohmann::ordered_json{{"kind", "trained"}, {"arch", mudd.arch}, {"checkpoints", c.study.seeds.size()}}
                                 : nlohmann::ordered_json{{"kind", "checkpoint"}, {"path", mudd.path}, {"checkpoints", 1},
                                                          {"reps", mudd.audit_reps > 0 ? mudd.audit_reps : c.study.audit_reps}};
  p["sections"] = nlohmann::ordered_json::array();
  for (const SectionSpec& s : paper_sections(c)) {
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const RowSpec& r : s.rows) {
      nlohmann::ordered_json cells = nlohmann::ordered_json::array();
      for (size_t i = 0; i < c.corpora.size(); ++i) {
        const Measured m = r.cell(studies[i]);
        const std::string id = r.id + "." + c.corpora[i].paper_key;
        cells.push_back({{"corpus", c.corpora[i].name}, {"id", id}, {"measured", m.text}, {"value", m.value}, {"data", m.data},
                         {"paper", paper_cell(values, id)}});
      }
      rows.push_back({{"id", r.id}, {"label", r.label}, {"cells", cells}});
    }
    p["sections"].push_back({{"id", s.id}, {"title", s.title}, {"note", s.note}, {"rows", rows}});
  }
  p["claims"] = nlohmann::ordered_json::array();
  for (const ClaimSpec& k : paper_claims())
    for (size_t i = 0; i < c.corpora.size(); ++i) p["claims"].push_back(claim_json(k, k.decide(studies[i]), c.corpora[i], values));
  values.check_all_printed();
  auto prov = provenance_base();
  prov["config_seeds"] = c.study.seeds;
  for (size_t i = 0; i < c.corpora.size(); ++i) prov["data"][c.corpora[i].name] = studies[i].exec()["provenance"]["data"];
  p["provenance"] = prov;
  return p;
}

}  // namespace fca
