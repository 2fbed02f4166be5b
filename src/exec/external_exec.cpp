#include "exec/external_exec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "core/error.h"
#include "core/json_fields.h"
#include "core/parse.h"
#include "exec/exec_family.h"
#include "models/external/auditable.h"

namespace fca {
namespace {

// Counts and rows are integers held exactly in a double; FLOPs any number up to 1e30 (a bound that
// reads plainly in errors, far above any pass).
constexpr int64_t kMaxCount = int64_t(1) << 53;
constexpr double kMaxFlops = 1e30;

nlohmann::ordered_json parse_json_text(const std::string& text, const std::string& where) {
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + " is not valid JSON (" + e.what() + ")");
  }
}

// JsonFields reads an absent key as its fallback: every key here is required.
void require(const JsonFields& f, const std::vector<std::string>& keys) {
  for (const auto& k : keys)
    if (!f.has(k)) throw Error(f.where() + ": '" + k + "' is missing");
}

// An object of operator -> its calls (zero_ops, uncounted_ops).
nlohmann::ordered_json op_calls(const JsonFields& counts, const std::string& key) {
  const JsonFields ops(counts.json().at(key), counts.where() + ": '" + key + "'", {}, UnknownKeys::ignored);
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& [op, calls] : ops.json().items()) out[op] = ops.integer(op, 0, 0, kMaxCount);
  return out;
}

// unseen_work: [{kind, module, what, calls}], work that ran and that no formula counted
// (counting.py): a parameter of a module that ran which took part in no counted product, or a
// multiply-then-sum product.
nlohmann::ordered_json unseen_work(const JsonFields& counts) {
  const nlohmann::json& list = counts.json().at("unseen_work");
  if (!list.is_array()) throw Error(counts.where() + ": 'unseen_work' must be an array, found " + list.dump().substr(0, 60));
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonFields u(list[i], counts.where() + ": unseen_work[" + std::to_string(i) + "]", {"kind", "module", "what", "calls"});
    require(u, {"kind", "module", "what", "calls"});
    const std::string kind = u.text("kind", "");
    if (kind != "parameter" && kind != "multiply_then_sum")
      throw Error(u.where() + ": kind \"" + kind + "\", expected \"parameter\" or \"multiply_then_sum\"");
    out.push_back({{"kind", kind}, {"module", u.text("module", "")}, {"what", u.text("what", "")}, {"calls", u.integer("calls", 0, 0, kMaxCount)}});
  }
  return out;
}

// The first index where two digest lists differ (their size when they agree everywhere).
size_t first_difference(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i == b.size() && a.size() == b.size() ? a.size() : i;
}

// unit_warnings: ["<kind> unit '<module>': ..."], units that ran products on 0 rows or rows with no product.
nlohmann::ordered_json unit_warnings(const JsonFields& counts) {
  const nlohmann::json& list = counts.json().at("unit_warnings");
  if (!list.is_array()) throw Error(counts.where() + ": 'unit_warnings' must be an array, found " + list.dump().substr(0, 60));
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string())
      throw Error(counts.where() + ": unit_warnings[" + std::to_string(i) + "] must be a string, found " + list[i].dump().substr(0, 60));
    out.push_back(list[i].get<std::string>());
  }
  return out;
}

}  // namespace

ExternalExecSetup parse_exec_prepare(const SafetensorsReader& a) {
  ExternalExecSetup s;
  const nlohmann::ordered_json modes = parse_json_text(answer_text(a, "modes"), a.path() + ": modes");
  if (!modes.is_array() || modes.empty()) throw Error(a.path() + ": modes must be a non-empty JSON array, found " + modes.dump());
  for (size_t i = 0; i < modes.size(); ++i) {
    // An entry may carry more than fca reads (fca_adapter names static_profile's profile).
    const JsonFields m(modes[i], a.path() + ": modes[" + std::to_string(i) + "]", {}, UnknownKeys::ignored);
    require(m, {"mode"});
    const std::string mode = m.text("mode", "");
    if (mode != "live" && mode != "replay" && mode != "static_profile" && mode != "reference")
      throw Error(m.where() + ": mode \"" + mode + "\", expected live, replay, static_profile or reference");
    if (std::find(s.modes.begin(), s.modes.end(), mode) != s.modes.end()) throw Error(m.where() + ": mode \"" + mode + "\" is offered twice");
    if ((i == 0) != (mode == "live")) throw Error(a.path() + ": modes must list \"live\" first, found " + modes.dump());
    if (mode == "reference") {
      require(m, {"label"});
      s.reference_label = m.text("label", "");
      if (s.reference_label.empty()) throw Error(m.where() + ": the reference's label is empty");
    }
    s.modes.push_back(mode);
  }
  s.device = answer_text(a, "device");
  if (s.device.empty()) throw Error(a.path() + ": device is empty");
  s.timer = answer_text(a, "timer");
  if (s.timer != "perf_counter" && s.timer != "cuda_events")
    throw Error(a.path() + ": timer \"" + s.timer + "\", expected \"perf_counter\" or \"cuda_events\"");
  s.threads = answer_integer(a, "threads", 1, 1 << 20);
  s.timed_pass = answer_text(a, "timed_pass");
  if (s.timed_pass.empty()) throw Error(a.path() + ": timed_pass is empty (what the adapter times, in words)");
  const nlohmann::ordered_json units = parse_json_text(answer_text(a, "units"), a.path() + ": units");
  const JsonFields u(units, a.path() + ": units", {}, UnknownKeys::ignored);
  s.units = nlohmann::ordered_json::object();
  for (const auto& [kind, modules] : units.items()) s.units[kind] = u.integer(kind, 0, 0, kMaxCount);
  return s;
}

namespace {

// The adapter's per-module counts ('modules'), each field checked.
nlohmann::ordered_json module_counts(const JsonFields& c) {
  const nlohmann::json& modules = c.json().at("modules");
  if (!modules.is_array()) throw Error(c.where() + ": 'modules' must be an array, found " + modules.dump().substr(0, 60));
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < modules.size(); ++i) {
    const JsonFields m(modules[i], c.where() + ": modules[" + std::to_string(i) + "]",
                       {"name", "class", "calls", "rows", "flops", "controller"});
    require(m, {"name", "class", "calls", "rows", "flops", "controller"});
    out.push_back({{"name", m.text("name", "")},
                   {"class", m.text("class", "")},
                   {"calls", m.integer("calls", 0, 0, kMaxCount)},
                   {"rows", m.integer("rows", 0, 0, kMaxCount)},
                   {"gflop", m.number("flops", 0, 0, kMaxFlops) / 1e9},
                   {"controller", m.flag("controller", false)}});
  }
  return out;
}

// The adapter's GEMM counts by operator ('gemm_ops'): calls and GFLOP.
nlohmann::ordered_json gemm_op_counts(const JsonFields& c) {
  const JsonFields gemm_ops(c.json().at("gemm_ops"), c.where() + ": 'gemm_ops'", {}, UnknownKeys::ignored);
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& [op, entry] : gemm_ops.json().items()) {
    const JsonFields e = gemm_ops.object(op, {"calls", "flops"});
    require(e, {"calls", "flops"});
    out[op] = {{"calls", e.integer("calls", 0, 0, kMaxCount)}, {"gflop", e.number("flops", 0, 0, kMaxFlops) / 1e9}};
  }
  return out;
}

}  // namespace

nlohmann::ordered_json external_counted_fields(const std::string& text, const std::string& mode,
                                               const nlohmann::ordered_json& units, int64_t tokens_per_pass,
                                               const std::string& where) {
  const JsonFields c(parse_json_text(text, where + ": counts"), where + ": counts", {}, UnknownKeys::ignored);
  require(c, {"gemm_flops", "controller_flops", "controller_evaluations", "units", "modules", "gemm_ops", "zero_ops", "uncounted_ops",
              "unseen_work", "unit_warnings"});
  const double gemm = c.number("gemm_flops", 0, 0, kMaxFlops), controller = c.number("controller_flops", 0, 0, kMaxFlops);
  const int64_t evaluations = c.integer("controller_evaluations", 0, 0, kMaxCount);
  if (mode == "live" && evaluations < 1)
    throw Error(c.where() + ": the live pass reports 0 controller evaluations; a live pass runs the controller (is the "
                "controller module named, or counted, in the adapter?)");
  if ((mode == "replay" || mode == "static_profile") && evaluations != 0)
    throw Error(c.where() + ": the " + mode + " pass reports " + std::to_string(evaluations) +
                " controller evaluations, expected 0: the controller's outputs are handed over, so it must not run");

  // Every unit kind of exec_prepare with its matched modules, and no other: [kind] -> rows, calls.
  const JsonFields u(c.json().at("units"), c.where() + ": 'units'", {}, UnknownKeys::ignored);
  bool same_kinds = u.json().size() == units.size();
  for (const auto& [kind, modules] : units.items()) same_kinds = same_kinds && u.has(kind);
  if (!same_kinds)
    throw Error(u.where() + " names the unit kinds " + u.json().dump() + ", expected those of exec_prepare " + units.dump() +
                " (the units must be the same in every answer)");
  const double tokens = double(tokens_per_pass);
  nlohmann::ordered_json j, per_token = nlohmann::ordered_json::object(), rows = nlohmann::ordered_json::object(),
                            calls = nlohmann::ordered_json::object(), absent = nlohmann::ordered_json::object();
  j["total_blocks"] = units.contains("blocks") ? units["blocks"] : nlohmann::ordered_json(nullptr);
  j["executed_blocks"] = nullptr;
  for (const auto& [kind, modules] : units.items()) {
    const JsonFields k = u.object(kind, {"modules", "calls", "rows", "absent"});
    require(k, {"modules", "calls", "rows"});
    const int64_t matched = k.integer("modules", 0, 0, kMaxCount);
    // A reference may lack a unit kind of the model (a Dense reference of an MoE has no experts):
    // it then matches no module, runs none and says why.
    if (k.has("absent")) {
      if (mode != "reference" || matched != 0 || k.integer("rows", 0, 0, kMaxCount) != 0 || k.integer("calls", 0, 0, kMaxCount) != 0)
        throw Error(k.where() + ": 'absent' is for a unit kind the reference lacks (mode reference, 0 modules, calls and rows), "
                    "found mode " + mode + " with " + std::to_string(matched) + " modules");
      absent[kind] = k.text("absent", "");
    } else if (matched != modules.get<int64_t>())
      throw Error(k.where() + ": " + std::to_string(matched) + " modules, expected exec_prepare's " + modules.dump() +
                  " (the units must be the same in every answer)");
    rows[kind] = k.integer("rows", 0, 0, kMaxCount);
    calls[kind] = k.integer("calls", 0, 0, kMaxCount);
    per_token[kind] = rows[kind].get<double>() / tokens;
  }
  if (units.contains("blocks")) j["executed_blocks"] = per_token["blocks"];
  j["executed_units_per_token"] = per_token;
  j["unit_rows_per_pass"] = rows;
  j["unit_calls_per_pass"] = calls;
  j["controller_evaluations_per_pass"] = evaluations;
  j["gflop_per_pass"] = (gemm + controller) / 1e9;
  j["gflop_per_token"] = (gemm + controller) / 1e9 / tokens;
  j["gflop_per_pass_by_kind"] = {{"gemm", gemm / 1e9}, {"controller", controller / 1e9}};

  j["gemm_ops"] = gemm_op_counts(c);
  j["zero_ops"] = op_calls(c, "zero_ops");
  j["uncounted_ops"] = op_calls(c, "uncounted_ops");
  j["unseen_work"] = unseen_work(c);
  j["unit_warnings"] = unit_warnings(c);
  // Computed here from what the adapter listed, not taken from it: a pass with an operator without a
  // formula, or with work the counter could not see, is not fully counted, and no saving is claimed from it.
  j["fully_counted"] = j["uncounted_ops"].empty() && j["unseen_work"].empty();
  if (!absent.empty()) j["absent_units"] = absent;
  j["modules"] = module_counts(c);
  return j;
}

std::string parse_exec_pass(const SafetensorsReader& a, const std::string& mode, int w0, int n, double* nll,
                            nlohmann::ordered_json* counted, const nlohmann::ordered_json& units, int64_t tokens_per_pass) {
  const std::string where = a.path() + " (mode " + mode + ")";
  const TensorInfo& values = answer_tensor(a, "nll", DType::F64, {n});
  std::memcpy(nll, values.data, values.nbytes);
  for (int b = 0; b < n; ++b)
    if (!std::isfinite(nll[b])) throw Error(where + ": evaluation window " + std::to_string(w0 + b) + " has NLL " + std::to_string(nll[b]));
  if (counted != nullptr) *counted = external_counted_fields(answer_text(a, "counts"), mode, units, tokens_per_pass, where);
  return answer_sha256(a, "logits_sha256");
}

double external_seconds(const SafetensorsReader& a) {
  const std::string text = answer_text(a, "seconds");
  const double s = parse_number(text, a.path() + ": seconds", 0.0, 1e6);
  if (!(s > 0 && s < 1e6)) throw Error(a.path() + ": seconds is \"" + text + "\", expected a time > 0 and < 1e6 s");
  return s;
}

nlohmann::ordered_json measure_external(const std::string& command, const Corpus& corpus, const ExecOptions& o,
                                        TimedModes& timed) {
  // Shared with the timed measurements: the adapter stays open until the interleaved rounds end.
  const auto model = std::make_shared<ExternalAuditable>(command, o.external_timeout_s);
  const int T = model->max_tokens(), B = o.batch;
  const TextSplit& test = corpus.split("test");
  const TextSplit& valid = corpus.split("valid");
  const std::vector<int32_t> test_ids = model->tokenize(test.name(), {test.bytes(), test.size()});
  // As for a native model: the timing batch is B windows of the test split, the NLL is over the
  // evaluation windows, and the static profile comes from the valid split.
  const WindowSet timing = make_windows(test_ids, test, T, B);
  const WindowSet eval = make_windows(test_ids, test, T, o.eval_windows);
  const WindowSet calib = make_windows(model->tokenize(valid.name(), {valid.bytes(), valid.size()}), valid, T, o.calib_windows);
  AdapterConnection& adapter = model->connection();
  const std::string& adapter_name = adapter.label();
  const ExternalExecSetup setup = parse_exec_prepare(adapter.request(
      "exec_prepare", {{"inputs", {timing.count(), T}, timing.inputs.data(), DType::I32},
                       {"calibration", {calib.count(), T}, calib.inputs.data(), DType::I32}}));
  const int64_t tokens_per_pass = int64_t(timing.count()) * T;

  // One exec_pass of windows w0 .. w0 + n - 1 of `windows` in `mode`: the NLL per window into `nll`
  // [n]; with `counted`, the pass is counted and its fields go there. Returns the logits digest.
  auto pass = [&](const WindowSet& windows, const std::string& mode, int w0, int n, double* nll, nlohmann::ordered_json* counted) {
    const int32_t* inputs = windows.inputs.data() + int64_t(w0) * T;
    const int32_t* targets = windows.targets.data() + int64_t(w0) * T;
    return parse_exec_pass(adapter.request("exec_pass",
                                           {{"inputs", {n, T}, inputs, DType::I32}, {"targets", {n, T}, targets, DType::I32}},
                                           {{"mode", mode}, {"count", counted != nullptr ? "1" : "0"}}),
                           mode, w0, n, nll, counted, setup.units, tokens_per_pass);
  };

  nlohmann::ordered_json m = exec_model_entry(model->model_path(), model->content_hash(), "external",
                                              nlohmann::ordered_json::parse(model->config_json()), tokens_per_pass);
  m["adapter_command"] = command;
  m["label"] = model->adapter_family();
  m["description"] = model->description();
  m["device"] = setup.device;
  m["timer"] = setup.timer;
  m["adapter_threads"] = setup.threads;
  m["timed_pass"] = setup.timed_pass;
  m["units"] = setup.units;
  m["reference"] = setup.reference_label.empty()
                       ? nlohmann::ordered_json(nullptr)
                       : nlohmann::ordered_json{{"label", setup.reference_label}, {"mode", "reference"}};
  m["modes"] = nlohmann::ordered_json::array();
  // Live's logits digests: its counted pass of the timing batch, then each evaluation batch.
  std::vector<std::string> live_digests;
  for (const std::string& mode : setup.modes) {
    nlohmann::ordered_json entry{{"mode", mode}}, counted;
    std::vector<double> timing_nll(size_t(timing.count()), 0.0);
    std::vector<std::string> digests{pass(timing, mode, 0, timing.count(), timing_nll.data(), &counted)};
    entry.update(counted);
    entry["nll"] = mean_window_nll(eval.count(), B, [&](int w0, int n, double* out) { digests.push_back(pass(eval, mode, w0, n, out, nullptr)); });
    if (mode == "live") live_digests = digests;
    if (mode == "replay") {
      // Exact replay: the same logits as live, batch by batch (timing a replay that computes
      // something else would say nothing about the live model). Computed from the digests.
      const size_t first_differing = first_difference(digests, live_digests);
      entry["exact"] = first_differing == digests.size();
      if (!entry["exact"].get<bool>()) {
        const size_t i = first_differing;
        const int w0 = i == 0 ? 0 : int(i - 1) * B, n = i == 0 ? timing.count() : std::min(B, eval.count() - w0);
        throw Error(adapter_name + ": the replay of " + (i == 0 ? "the counted timing batch" : "evaluation batch " + std::to_string(i - 1)) +
                    " (windows " + std::to_string(w0) + " .. " + std::to_string(w0 + n - 1) + ") has logits SHA-256 " +
                    digests[i].substr(0, 16) + "..., the live pass " + live_digests[i].substr(0, 16) +
                    "...: replay is not exact, so its timing would not measure the live model's computation");
      }
    }
    timed.add_self_timed("modes", m["modes"].size(), [model, mode] {
      return external_seconds(model->connection().request("exec_time", {}, {{"mode", mode}}));
    });
    m["modes"].push_back(entry);
  }
  if (!setup.reference_label.empty()) {
    const auto reference = std::find(setup.modes.begin(), setup.modes.end(), "reference") - setup.modes.begin();
    timed.add_saving(0, size_t(reference));
  }
  return m;
}

}  // namespace fca
