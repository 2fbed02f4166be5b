// Stage 1 of the audit: the coefficient cache. A live run over the evaluation and calibration
// windows writes every coefficient tensor and per-window NLL into a safetensors file as it goes
// (so a cache larger than memory works), with a manifest naming the model, data, windows and axes.
// Reading memory-maps it; a cache whose manifest does not match, or a truncated one, is refused.
//
// Tensors: eval.coefficients [W_eval, L, T, S, K] F32, calib.coefficients [W_cal, L, T, S, K] F32,
// eval.nll [W_eval] F64, calib.nll [W_cal] F64, mask [L, S, K] F32 (1 = valid coordinate); routing
// records add eval.discrete [W_eval, L, T, slots] and calib.discrete [W_cal, L, T, slots] I32, each
// checked on opening (expert indices in range and distinct; exactly K selected tokens).
// Metadata: format "fca-audit-cache-v1", manifest (JSON), provenance (JSON).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/json.h"
#include "core/safetensors.h"
#include "data/corpus.h"
#include "models/auditable.h"

namespace fca {

class RecordedLiveRun;  // audit/recorded_live.h

struct CacheManifest {
  std::string family, model_description, model_sha256;
  std::string eval_split, eval_split_sha256, calib_split, calib_split_sha256;
  std::vector<int64_t> eval_windows, calib_windows;  // window indices in their splits
  int tokens = 0;
  int batch = 0;  // windows per forward pass of the run that wrote it
  // Not stored: whether the auditing model's results are independent of the batch. When they are,
  // a cache written at one batch serves audits at any other; otherwise the batch must match.
  bool batch_invariant = false;
  CoefficientShape shape;
  std::string dtype = "F32";
  std::vector<std::string> axes{"window", "layer", "token", "stream", "source"};
  uint64_t seed = 0;  // the audit seed of the run that wrote it (informational)
  // The build that wrote it (build_description()). Informational, not matched: another build's
  // cache is used only when exact replay, which always runs, reproduces its NLLs bit for bit.
  std::string build;
  // The precision of the matrix products that wrote it (ops/onednn_matmul.h: "fp32", "bf16");
  // matched: a replay in another precision cannot reproduce the recorded NLLs. Caches written
  // before the field existed were fp32.
  std::string precision = "fp32";
  // The controller's inference setting the records depend on (ControllerSetting, models/capabilities.h:
  // an exit model's threshold); matched. Empty (and not written) for models without one.
  std::string controller_setting;

  nlohmann::ordered_json to_json() const;
  static CacheManifest from_json(const nlohmann::json& j, const std::string& where);
  // Throws Error naming the first field where `found` differs from this (expected) manifest.
  void check_matches(const CacheManifest& found, const std::string& where) const;
};

// Runs the live model over both sets and writes the cache to `path` (atomically). Distributed, the
// window batches are spread over the ranks (audit/work_split.h) and rank 0 writes what they
// recorded, in window order; every rank returns once the file is complete. With `recorded_live`,
// each rank keeps there the logits and NLLs of the evaluation batches it ran (recorded_live.h).
void write_coefficient_cache(const std::string& path, const CacheManifest& manifest, AuditableModel& model,
                             const WindowSet& evaluation, const WindowSet& calibration, int batch, bool progress,
                             const nlohmann::ordered_json& provenance, const Communicator& comm = single_process(),
                             RecordedLiveRun* recorded_live = nullptr);

class CoefficientCache {
 public:
  // Opens and validates against `expected`.
  CoefficientCache(const std::string& path, const CacheManifest& expected);
  CoefficientView evaluation() const { return view(eval_); }
  CoefficientView calibration() const { return view(calib_); }
  const std::vector<double>& evaluation_nll() const { return eval_nll_; }
  const std::vector<double>& calibration_nll() const { return calib_nll_; }
  const std::string& path() const { return reader_.path(); }
  const CacheManifest& manifest() const { return manifest_; }  // as found in the file

 private:
  CoefficientView view(const TensorInfo* t) const;
  SafetensorsReader reader_;
  CacheManifest manifest_;
  const TensorInfo* eval_ = nullptr;
  const TensorInfo* calib_ = nullptr;
  const TensorInfo* eval_discrete_ = nullptr;  // routing records only
  const TensorInfo* calib_discrete_ = nullptr;
  std::vector<uint8_t> mask_;
  std::vector<double> eval_nll_, calib_nll_;
};

// Opens the cache on this rank; an error on a rank other than 0 says that the file rank 0 wrote must
// be visible to every rank.
CoefficientCache open_cache(const std::string& path, const CacheManifest& expected, const Communicator& comm);

}  // namespace fca
