#include "audit/exact_replay.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "audit/journal.h"
#include "core/error.h"

namespace fca {
namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void compare_values(double live, double replay, double& max_delta, int64_t& non_finite) {
  if (!std::isfinite(live) || !std::isfinite(replay)) {
    ++non_finite;
    return;
  }
  max_delta = std::max(max_delta, std::abs(replay - live));
}

std::string format_g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

double bits_field(const nlohmann::json& j, const char* key, const std::string& where) {
  double v = 0;
  bits_to_doubles(nlohmann::json::array({j.at(key)}), &v, 1, where);
  return v;
}

}  // namespace

bool ExactReplay::passed(double tolerance) const {
  if (non_finite > 0 || digest_mismatches > 0) return false;
  if (by_digest && recording_differing_logits > 0) return false;
  if (tolerance == 0)
    return differing_logits == 0 && differing_nll_windows == 0 && recording_differing_logits == 0 &&
           recording_differing_nll_windows == 0;
  return max_abs_delta_logit <= tolerance && max_abs_delta_nll <= tolerance && max_abs_delta_nll_cache <= tolerance &&
         recording_max_abs_delta <= tolerance;
}

void ExactReplay::merge(const ExactReplay& b) {
  max_abs_delta_logit = std::max(max_abs_delta_logit, b.max_abs_delta_logit);
  max_abs_delta_nll = std::max(max_abs_delta_nll, b.max_abs_delta_nll);
  max_abs_delta_nll_cache = std::max(max_abs_delta_nll_cache, b.max_abs_delta_nll_cache);
  differing_logits += b.differing_logits;
  differing_nll_windows += b.differing_nll_windows;
  non_finite += b.non_finite;
  controller_evaluations += b.controller_evaluations;
  by_digest = b.by_digest;
  digest_mismatches += b.digest_mismatches;
  batches += b.batches;
  live_from_recording += b.live_from_recording;
  recording_checks += b.recording_checks;
  recording_differing_logits += b.recording_differing_logits;
  recording_differing_nll_windows += b.recording_differing_nll_windows;
  recording_max_abs_delta = std::max(recording_max_abs_delta, b.recording_max_abs_delta);
}

nlohmann::ordered_json ExactReplay::to_json(double tolerance) const {
  return {{"max_abs_delta_logit", max_abs_delta_logit},
          {"max_abs_delta_nll", max_abs_delta_nll},
          {"max_abs_delta_nll_vs_cache", max_abs_delta_nll_cache},
          {"tolerance", tolerance},
          {"logits_compared", by_digest ? "sha256" : "values"},
          {"differing_logits", differing_logits},
          {"differing_nll_windows", differing_nll_windows},
          {"non_finite", non_finite},
          {"batches", batches},
          // What the replay was compared with (recorded_live.h): the same words in every run, so
          // that the results stay bitwise those of a run that reused its cache; how many batches
          // took each path is a run fact (provenance.run.exact_replay_live_pass).
          {"compared_with",
           "the live run: the pass that recorded the cache where its logits are kept, else a plain live pass (no "
           "recording); the recording pass is itself compared with a plain live pass on the first such batch of every rank"},
          {"recording_vs_plain_live",
           {{"differing_logits", recording_differing_logits},
            {"differing_nll_windows", recording_differing_nll_windows},
            {"max_abs_delta", recording_max_abs_delta}}},
          {"passed", passed(tolerance)}};
}

std::string ExactReplay::failure(double tolerance) const {
  return (by_digest ? "logits SHA-256 differs in " + std::to_string(digest_mismatches) + " of " + std::to_string(batches) +
                          " batches"
                    : std::to_string(differing_logits) + " logits differ in bits, max |delta logit| " +
                          format_g(max_abs_delta_logit)) +
         "; " + std::to_string(differing_nll_windows) + " windows' NLL differ in bits, max |delta NLL| " +
         format_g(max_abs_delta_nll) + ", against the cache " + format_g(max_abs_delta_nll_cache) + "; " +
         std::to_string(non_finite) + " non-finite values; tolerance " + format_g(tolerance) +
         (recording_differing_logits + recording_differing_nll_windows > 0
              ? "; the pass that recorded the cache differs from the plain live pass (" +
                    (by_digest ? std::string("logits SHA-256 differs") : std::to_string(recording_differing_logits) + " logits differ in bits") +
                    ", " + std::to_string(recording_differing_nll_windows) + " windows' NLL, max |delta| " +
                    format_g(recording_max_abs_delta) + "): recording the coefficients changed the run"
              : "");
}

namespace {

// One pass's logits (or, for a model whose logits stay in an adapter process, their SHA-256) and
// per-window NLLs.
struct PassOutput {
  std::vector<float> logits;  // [B, T, vocab]; empty when by digest
  std::string digest;
  std::vector<double> nll;    // [B]
};

// The plain live pass (no recording) over windows [w0, w0 + B), from NaN logits: a pass that wrote
// none would otherwise compare the previous pass's logits with themselves.
PassOutput plain_live_pass(AuditableModel& model, const WindowSet& eval, int w0, int B) {
  const int T = eval.tokens;
  const int64_t off = int64_t(w0) * T;
  PassOutput out;
  out.nll.resize(static_cast<size_t>(B));
  model.poison_logits(B, T);
  model.run_live(eval.inputs.data() + off, eval.targets.data() + off, B, T, nullptr, 0, out.nll.data());
  if (model.last_logits() == nullptr) out.digest = model.last_logits_sha256();
  else out.logits.assign(model.last_logits(), model.last_logits() + size_t(B) * T * size_t(model.vocab()));
  return out;
}

// The recording pass against the plain live pass of the same windows: both are "the live run".
void compare_recording(const RecordedLiveRun::Batch& recording, const PassOutput& live, bool by_digest, ExactReplay& r) {
  r.recording_checks = 1;
  if (by_digest) {
    if (recording.logits_sha256 != live.digest) ++r.recording_differing_logits;
  } else {
    for (size_t i = 0; i < live.logits.size(); ++i) {
      if (!same_bits(recording.logits[i], live.logits[i])) ++r.recording_differing_logits;
      compare_values(live.logits[i], recording.logits[i], r.recording_max_abs_delta, r.non_finite);
    }
  }
  for (size_t b = 0; b < live.nll.size(); ++b) {
    if (!same_bits(recording.nll[b], live.nll[b])) ++r.recording_differing_nll_windows;
    compare_values(live.nll[b], recording.nll[b], r.recording_max_abs_delta, r.non_finite);
  }
}

}  // namespace

ExactReplay exact_replay_batch(AuditableModel& model, const WindowSet& eval, const CoefficientView& A,
                               const std::vector<double>& cached_nll, int w0, int B, double* replayed_nll,
                               const RecordedLiveRun::Batch* recorded, bool check_recording) {
  ExactReplay r;
  const int T = eval.tokens;
  const int64_t before = model.replay_controller_evaluations();
  const int64_t off = int64_t(w0) * T;
  const size_t n_logits = size_t(B) * T * size_t(model.vocab());
  r.by_digest = model.last_logits() == nullptr;
  PassOutput live;
  if (recorded != nullptr) {
    if (recorded->windows != B || (r.by_digest ? recorded->logits_sha256.empty() : recorded->logits.size() != n_logits))
      throw Error("internal error: the recording pass kept for windows " + std::to_string(w0) + ".. covers another batch");
    r.live_from_recording = 1;
    if (check_recording) compare_recording(*recorded, plain_live_pass(model, eval, w0, B), r.by_digest, r);
    live.nll = recorded->nll;
    live.digest = recorded->logits_sha256;
  } else {
    live = plain_live_pass(model, eval, w0, B);
  }
  const std::vector<float>& live_values = recorded != nullptr ? recorded->logits : live.logits;
  CoefficientTensor coefficients = model.make_coefficients(B, T);
  for (int b = 0; b < B; ++b) coefficients.copy_window(b, A, w0 + b);
  model.poison_logits(B, T);
  model.run_replay(eval.inputs.data() + off, eval.targets.data() + off, B, T, coefficients, replayed_nll);
  r.batches = 1;
  if (r.by_digest) {
    if (model.last_logits_sha256() != live.digest) ++r.digest_mismatches;
  } else {
    const float* replay_logits = model.last_logits();
    for (size_t i = 0; i < n_logits; ++i) {
      if (!same_bits(replay_logits[i], live_values[i])) ++r.differing_logits;
      compare_values(live_values[i], replay_logits[i], r.max_abs_delta_logit, r.non_finite);
    }
  }
  for (int b = 0; b < B; ++b) {
    const double v = replayed_nll[b], live_nll = live.nll[size_t(b)], cached = cached_nll[size_t(w0 + b)];
    if (!same_bits(v, live_nll) || !same_bits(v, cached)) ++r.differing_nll_windows;
    compare_values(live_nll, v, r.max_abs_delta_nll, r.non_finite);
    compare_values(cached, v, r.max_abs_delta_nll_cache, r.non_finite);
  }
  r.controller_evaluations = model.replay_controller_evaluations() - before;
  return r;
}

nlohmann::json exact_replay_record(const ExactReplay& r, int w0, int B, const double* replayed_nll) {
  return {{"kind", "exact_replay"},
          {"w0", w0},
          {"B", B},
          {"max_abs_delta", doubles_to_bits(&r.max_abs_delta_logit, 1)[0]},
          {"max_abs_delta_nll", doubles_to_bits(&r.max_abs_delta_nll, 1)[0]},
          {"max_abs_delta_nll_cache", doubles_to_bits(&r.max_abs_delta_nll_cache, 1)[0]},
          {"differing_logits", r.differing_logits},
          {"differing_nll_windows", r.differing_nll_windows},
          {"non_finite", r.non_finite},
          {"controller_evaluations", r.controller_evaluations},
          {"by_digest", r.by_digest},
          {"digest_mismatches", r.digest_mismatches},
          {"live_from_recording", r.live_from_recording},
          {"recording_checks", r.recording_checks},
          {"recording_differing_logits", r.recording_differing_logits},
          {"recording_differing_nll_windows", r.recording_differing_nll_windows},
          {"recording_max_abs_delta", doubles_to_bits(&r.recording_max_abs_delta, 1)[0]},
          {"nll", doubles_to_bits(replayed_nll, size_t(B))}};
}

ExactReplay exact_replay_from_record(const nlohmann::json& j, int B, double* replayed_nll, const std::string& where) {
  ExactReplay r;
  try {
    if (j.at("B").get<int>() != B) throw Error(where + ": the exact-replay record covers another batch of windows");
    r.max_abs_delta_logit = bits_field(j, "max_abs_delta", where);
    r.max_abs_delta_nll = bits_field(j, "max_abs_delta_nll", where);
    r.max_abs_delta_nll_cache = bits_field(j, "max_abs_delta_nll_cache", where);
    r.differing_logits = j.at("differing_logits").get<int64_t>();
    r.differing_nll_windows = j.at("differing_nll_windows").get<int64_t>();
    r.non_finite = j.at("non_finite").get<int64_t>();
    r.controller_evaluations = j.at("controller_evaluations").get<int64_t>();
    r.by_digest = j.at("by_digest").get<bool>();
    r.digest_mismatches = j.at("digest_mismatches").get<int>();
    r.live_from_recording = j.at("live_from_recording").get<int>();
    r.recording_checks = j.at("recording_checks").get<int>();
    r.recording_differing_logits = j.at("recording_differing_logits").get<int64_t>();
    r.recording_differing_nll_windows = j.at("recording_differing_nll_windows").get<int64_t>();
    r.recording_max_abs_delta = bits_field(j, "recording_max_abs_delta", where);
    r.batches = 1;
    bits_to_doubles(j.at("nll"), replayed_nll, size_t(B), where + " exact-replay NLL");
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": malformed exact-replay record (" + e.what() + ")");
  }
  return r;
}

}  // namespace fca
