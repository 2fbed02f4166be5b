#include "audit/cache.h"

#include <cstring>
#include <map>
#include <optional>

#include "audit/recorded_live.h"
#include "audit/work_split.h"
#include "core/error.h"
#include "core/json_fields.h"
#include "core/progress.h"
#include "models/record_kind.h"
#include "ops/onednn_matmul.h"
#include "models/routing_record.h"

namespace fca {
namespace {
constexpr const char* kCacheFormat = "fca-audit-cache-v1";

nlohmann::ordered_json record_json(const CoefficientShape& shape) {
  nlohmann::ordered_json r{{"kind", record_kind_name(shape.kind)}, {"slots", shape.slots}, {"categories", shape.categories},
                           {"selected", shape.selected}};
  if (const auto extras = record_kind_row(shape.kind).write_manifest_extras) extras(r, shape);  // exit_depth: min_exit
  return r;
}
}  // namespace

nlohmann::ordered_json CacheManifest::to_json() const {
  nlohmann::ordered_json j{{"family", family},
          {"model_description", model_description},
          {"model_sha256", model_sha256},
          {"eval_split", eval_split},
          {"eval_split_sha256", eval_split_sha256},
          {"calib_split", calib_split},
          {"calib_split_sha256", calib_split_sha256},
          {"eval_windows", eval_windows},
          {"calib_windows", calib_windows},
          {"tokens", tokens},
          {"batch", batch},
          {"shape", {{"layer", shape.layers}, {"token", shape.tokens}, {"stream", shape.streams}, {"source", shape.sources}}},
          {"record", record_json(shape)},
          {"dtype", dtype},
          {"axes", axes},
          {"seed", seed},
          {"build", build},
          {"precision", precision}};
  if (!controller_setting.empty()) j["controller_setting"] = controller_setting;
  return j;
}


CacheManifest CacheManifest::from_json(const nlohmann::json& j, const std::string& where) {
  // Every field checked for its type and range before it is narrowed: a float where an index is
  // expected (converting 4e94 to int64 is undefined behaviour) is an error, not a value.
  constexpr int64_t kMany = int64_t(1) << 40;
  try {
    const JsonFields f(j, where + ": cache manifest",
                       {"family", "model_description", "model_sha256", "eval_split", "eval_split_sha256", "calib_split",
                        "calib_split_sha256", "eval_windows", "calib_windows", "tokens", "batch", "shape", "record", "dtype",
                        "axes", "seed", "build", "precision", "controller_setting"});
    CacheManifest m;
    m.family = f.text("family", "");
    m.model_description = f.text("model_description", "");
    m.model_sha256 = f.text("model_sha256", "");
    m.eval_split = f.text("eval_split", "");
    m.eval_split_sha256 = f.text("eval_split_sha256", "");
    m.calib_split = f.text("calib_split", "");
    m.calib_split_sha256 = f.text("calib_split_sha256", "");
    for (const char* required : {"eval_windows", "calib_windows", "tokens", "batch", "shape", "dtype", "axes", "seed"})
      if (!f.has(required)) throw Error(where + ": cache manifest: '" + required + "' is missing");
    m.eval_windows = f.integers("eval_windows", {}, 0, kMany);
    m.calib_windows = f.integers("calib_windows", {}, 0, kMany);
    m.tokens = int(f.integer("tokens", 0, 1, 1 << 20));
    m.batch = int(f.integer("batch", 0, 1, 1 << 20));
    const JsonFields s = f.object("shape", {"layer", "token", "stream", "source"});
    m.shape = {int(s.integer("layer", 0, 1, 1 << 16)), int(s.integer("token", 0, 1, 1 << 20)),
               int(s.integer("stream", 0, 1, 1 << 12)), int(s.integer("source", 0, 1, 1 << 16))};
    if (f.has("record")) {  // routing records (absent in caches of continuous coefficients)
      const JsonFields r = f.object("record", {"kind", "slots", "categories", "selected", "min_exit"});
      const std::string kind = r.text("kind", "");
      const RecordKindRow* row = record_kind_named(kind);
      if (row == nullptr) throw Error(where + ": unknown record kind '" + kind + "' in the cache manifest");
      m.shape.kind = row->kind;
      m.shape.slots = int(r.integer("slots", 0, 0, 1 << 16));
      m.shape.categories = int(r.integer("categories", 0, 0, 1 << 16));
      m.shape.selected = int(r.integer("selected", 0, 0, 1 << 20));
      if (row->read_manifest_extras != nullptr) row->read_manifest_extras(r, m.shape, where);
    }
    m.dtype = f.text("dtype", "");
    m.axes = j.at("axes").get<std::vector<std::string>>();
    const nlohmann::json& seed = j.at("seed");
    if (!seed.is_number_integer() || (!seed.is_number_unsigned() && seed.get<int64_t>() < 0))
      throw Error(where + ": cache manifest: 'seed' must be an integer in 0 .. 2^64-1, found " + seed.dump());
    m.seed = seed.get<uint64_t>();
    m.build = f.text("build", "");
    m.precision = f.text("precision", "fp32");
    (void)parse_matmul_precision(m.precision, where + ": cache manifest 'precision'");
    if (f.has("controller_setting")) m.controller_setting = f.text("controller_setting", "");
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": malformed cache manifest (" + e.what() + ")");
  }
}

void CacheManifest::check_matches(const CacheManifest& found, const std::string& where) const {
  auto differ = [&](const char* field, const std::string& expected, const std::string& actual) {
    throw Error(where + ": cache does not match this audit: " + field + " is " + actual + ", expected " + expected +
                " (delete the cache or pass another --cache)");
  };
  if (found.model_sha256 != model_sha256) differ("model_sha256", model_sha256, found.model_sha256);
  if (found.precision != precision)
    throw Error(where + ": the cache was written with --precision " + found.precision + " and this audit runs --precision " +
                precision + ": a replay in another precision cannot reproduce the recorded NLLs (rerun with --precision " +
                found.precision + ", or delete the cache or pass another --cache)");
  if (found.eval_split_sha256 != eval_split_sha256) differ("eval_split_sha256", eval_split_sha256, found.eval_split_sha256);
  if (found.calib_split_sha256 != calib_split_sha256)
    differ("calib_split_sha256", calib_split_sha256, found.calib_split_sha256);
  if (found.tokens != tokens) differ("tokens", std::to_string(tokens), std::to_string(found.tokens));
  if (!batch_invariant && found.batch != batch) differ("batch", std::to_string(batch), std::to_string(found.batch));
  if (!(found.shape == shape)) differ("shape", shape.to_string(), found.shape.to_string());
  if (found.eval_windows != eval_windows)
    differ("eval_windows", std::to_string(eval_windows.size()) + " windows", std::to_string(found.eval_windows.size()) + " other windows");
  if (found.calib_windows != calib_windows)
    differ("calib_windows", std::to_string(calib_windows.size()) + " windows",
           std::to_string(found.calib_windows.size()) + " other windows");
  if (found.dtype != dtype || found.axes != axes) differ("dtype/axes", dtype, found.dtype);
  if (found.controller_setting != controller_setting)
    differ("controller_setting", "\"" + controller_setting + "\"", "\"" + found.controller_setting + "\"");
}

namespace {

// The cache file's tensors, in file order: both sets' coefficients, their NLLs and the mask, then
// the discrete field of routing records (expert indices, selection flags) as I32.
std::vector<TensorToWrite> cache_tensors(const CoefficientShape& s, int64_t We, int64_t Wc) {
  std::vector<TensorToWrite> tensors{{"eval.coefficients", {We, s.layers, s.tokens, s.streams, s.sources}, nullptr},
                                     {"calib.coefficients", {Wc, s.layers, s.tokens, s.streams, s.sources}, nullptr},
                                     {"eval.nll", {We}, nullptr, DType::F64},
                                     {"calib.nll", {Wc}, nullptr, DType::F64},
                                     {"mask", {s.layers, s.streams, s.sources}, nullptr}};
  if (s.slots > 0) {
    tensors.push_back({"eval.discrete", {We, s.layers, s.tokens, s.slots}, nullptr, DType::I32});
    tensors.push_back({"calib.discrete", {Wc, s.layers, s.tokens, s.slots}, nullptr, DType::I32});
  }
  return tensors;
}

// One batch of the cache: windows w0 .. w0 + B - 1 of a set.
struct CacheUnit {
  const WindowSet* set;
  int w0, B;
};

// A unit's live pass, recorded: its coefficients (F32), its discrete field (I32) and its NLLs (F64),
// as bytes. With `recorded_live`, an evaluation batch's logits are kept for exact replay.
std::string record_unit(AuditableModel& model, const CacheUnit& u, int tokens, const WindowSet& evaluation,
                        RecordedLiveRun* recorded_live) {
  CoefficientTensor record = model.make_coefficients(u.B, tokens);
  std::vector<double> nll(static_cast<size_t>(u.B));
  const int64_t off = int64_t(u.w0) * u.set->tokens;
  const bool keep = recorded_live != nullptr && u.set == &evaluation;
  if (keep) model.poison_logits(u.B, u.set->tokens);  // the kept logits must be this pass's own
  model.run_live(u.set->inputs.data() + off, u.set->targets.data() + off, u.B, u.set->tokens, &record, 0, nll.data());
  if (keep) recorded_live->keep(model, u.w0, u.B, u.set->tokens, nll.data());
  std::string bytes;
  auto put = [&](const void* p, size_t n) { bytes.append(static_cast<const char*>(p), n); };
  put(record.values().data(), sizeof(float) * record.values().size());
  put(record.discrete().data(), sizeof(int32_t) * record.discrete().size());
  put(nll.data(), sizeof(double) * nll.size());
  return bytes;
}

}  // namespace

void write_coefficient_cache(const std::string& path, const CacheManifest& m, AuditableModel& model,
                             const WindowSet& evaluation, const WindowSet& calibration, int batch, bool progress,
                             const nlohmann::ordered_json& provenance, const Communicator& comm,
                             RecordedLiveRun* recorded_live) {
  const CoefficientShape& s = m.shape;
  const int64_t We = evaluation.count(), Wc = calibration.count();
  std::vector<float> mask_values(size_t(s.layers) * s.streams * s.sources);
  const CoefficientTensor probe = model.make_coefficients(1, s.tokens);
  for (size_t i = 0; i < mask_values.size(); ++i) mask_values[i] = probe.mask()[i] ? 1.0f : 0.0f;
  std::vector<double> eval_nll(static_cast<size_t>(We)), calib_nll(static_cast<size_t>(Wc));
  std::vector<int32_t> eval_discrete, calib_discrete;
  std::optional<SafetensorsStreamWriter> writer;
  if (comm.root())
    writer.emplace(path, cache_tensors(s, We, Wc),
                   std::map<std::string, std::string>{{"format", kCacheFormat}, {"manifest", m.to_json().dump()},
                                                      {"provenance", provenance.dump()}});
  // Units: the evaluation batches, then the calibration batches, in the order the file holds them.
  std::vector<CacheUnit> units;
  for (const auto* set : {&evaluation, &calibration})
    for (int w0 = 0; w0 < set->count(); w0 += batch) units.push_back({set, w0, std::min(batch, set->count() - w0)});
  std::vector<int> ids(units.size());
  for (size_t u = 0; u < units.size(); ++u) ids[u] = int(u);
  Progress bar("audit cache", We + Wc, "window");
  int64_t done = 0;
  run_units(
      comm, ids, [&](int id) { return record_unit(model, units[size_t(id)], s.tokens, evaluation, recorded_live); },
      [&](int id, std::string& bytes) {
        const CacheUnit& u = units[size_t(id)];
        const size_t values = sizeof(float) * size_t(u.B) * size_t(s.per_window());
        const size_t slots = sizeof(int32_t) * size_t(u.B) * size_t(s.layers) * s.tokens * size_t(s.slots);
        const size_t nlls = sizeof(double) * size_t(u.B);
        if (bytes.size() != values + slots + nlls)
          throw Error(path + ": a cache batch arrived with " + std::to_string(bytes.size()) + " bytes, expected " +
                      std::to_string(values + slots + nlls));
        writer->append(bytes.data(), values);
        std::vector<int32_t>& d = u.set == &evaluation ? eval_discrete : calib_discrete;
        const size_t at = d.size();
        d.resize(at + slots / sizeof(int32_t));
        if (slots > 0) std::memcpy(d.data() + at, bytes.data() + values, slots);
        std::vector<double>& nll = u.set == &evaluation ? eval_nll : calib_nll;
        std::memcpy(nll.data() + u.w0, bytes.data() + values + slots, nlls);
        done += u.B;
        if (progress) bar.update(done);
        return true;
      });
  if (comm.root()) {
    writer->append(eval_nll.data(), sizeof(double) * eval_nll.size());
    writer->append(calib_nll.data(), sizeof(double) * calib_nll.size());
    writer->append(mask_values.data(), sizeof(float) * mask_values.size());
    if (s.slots > 0) {
      writer->append(eval_discrete.data(), sizeof(int32_t) * eval_discrete.size());
      writer->append(calib_discrete.data(), sizeof(int32_t) * calib_discrete.size());
    }
    writer->commit();
    if (progress) bar.finish();
  }
  comm.barrier();  // the file is complete before any rank opens it
}

CoefficientCache open_cache(const std::string& path, const CacheManifest& expected, const Communicator& comm) {
  try {
    return CoefficientCache(path, expected);
  } catch (const Error& e) {
    if (comm.root()) throw;
    throw Error(std::string(e.what()) + " (on " + comm.description() + ": every rank reads the cache rank 0 wrote, so " +
                "the output folder, or --cache, must be on a filesystem all ranks see)");
  }
}

CoefficientCache::CoefficientCache(const std::string& path, const CacheManifest& expected) : reader_(path) {
  const auto& meta = reader_.metadata();
  auto fmt = meta.find("format");
  if (fmt == meta.end() || fmt->second != kCacheFormat)
    throw Error(path + ": not an fca audit cache (format \"" + (fmt == meta.end() ? std::string("none") : fmt->second) +
                "\", expected \"" + kCacheFormat + "\")");
  auto man = meta.find("manifest");
  if (man == meta.end()) throw Error(path + ": cache has no manifest");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(man->second);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": cache manifest is not valid JSON (" + e.what() + ")");
  }
  manifest_ = CacheManifest::from_json(j, path);
  expected.check_matches(manifest_, path);
  const CoefficientShape& s = manifest_.shape;
  const int64_t We = int64_t(manifest_.eval_windows.size()), Wc = int64_t(manifest_.calib_windows.size());
  auto tensor = [&](const std::string& name, const std::vector<int64_t>& shape, DType dtype) {
    const TensorInfo& t = reader_.get(name);
    if (t.shape != shape || t.dtype != dtype)
      throw Error(path + ": tensor '" + name + "' is " + dtype_name(t.dtype) + " " + shape_string(t.shape) + ", expected " +
                  dtype_name(dtype) + " " + shape_string(shape));
    return &t;
  };
  eval_ = tensor("eval.coefficients", {We, s.layers, s.tokens, s.streams, s.sources}, DType::F32);
  calib_ = tensor("calib.coefficients", {Wc, s.layers, s.tokens, s.streams, s.sources}, DType::F32);
  tensor("eval.nll", {We}, DType::F64);
  tensor("calib.nll", {Wc}, DType::F64);
  tensor("mask", {s.layers, s.streams, s.sources}, DType::F32);
  eval_nll_ = reader_.read_as_double("eval.nll");
  calib_nll_ = reader_.read_as_double("calib.nll");
  for (double v : reader_.read_as_double("mask")) mask_.push_back(v != 0 ? 1 : 0);
  if (s.slots > 0) {
    eval_discrete_ = tensor("eval.discrete", {We, s.layers, s.tokens, s.slots}, DType::I32);
    calib_discrete_ = tensor("calib.discrete", {Wc, s.layers, s.tokens, s.slots}, DType::I32);
    // Every routing record must be executable before any replay reads it.
    check_routing_records(view(eval_), path + " (eval.discrete)");
    check_routing_records(view(calib_), path + " (calib.discrete)");
  }
}

CoefficientView CoefficientCache::view(const TensorInfo* t) const {
  const TensorInfo* d = t == eval_ ? eval_discrete_ : calib_discrete_;
  return {reinterpret_cast<const float*>(t->data), int(t->shape[0]), manifest_.shape, mask_.data(),
          d != nullptr ? reinterpret_cast<const int32_t*>(d->data) : nullptr};
}

}  // namespace fca
