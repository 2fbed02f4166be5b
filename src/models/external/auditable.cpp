#include "models/external/auditable.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include "core/json.h"

#include "core/error.h"
#include "core/half.h"
#include "core/sha256.h"

namespace fca {
namespace {

RecordKind parse_record_kind(const SafetensorsReader& answer) {
  const std::string kind = answer_text(answer, "record_kind");
  for (RecordKind k : {RecordKind::continuous, RecordKind::expert_routing, RecordKind::token_selection})
    if (kind == record_kind_name(k)) return k;
  throw Error(answer.path() + ": record_kind \"" + kind + "\", expected continuous, expert_routing or token_selection");
}

// The per-window NLL [B] of a run answer, each finite, and its logits digest.
std::string read_nll_and_digest(const SafetensorsReader& a, int B, double* window_nll) {
  const TensorInfo& nll = answer_tensor(a, "nll", DType::F64, {B});
  std::memcpy(window_nll, nll.data, nll.nbytes);
  for (int b = 0; b < B; ++b)
    if (!std::isfinite(window_nll[b]))
      throw Error(a.path() + ": window " + std::to_string(b) + " of the batch has NLL " + std::to_string(window_nll[b]));
  return answer_sha256(a, "logits_sha256");
}

}  // namespace

namespace {

// The coefficient_dtypes answer: one dtype per layer, comma-separated (F32, F64, BF16 or F16).
std::vector<DType> parse_coefficient_dtypes(const SafetensorsReader& d, int layers) {
  std::vector<DType> out;
  const std::string dtypes = answer_text(d, "coefficient_dtypes");
  size_t begin = 0;
  while (begin <= dtypes.size()) {
    const size_t end = std::min(dtypes.find(',', begin), dtypes.size());
    const std::string name = dtypes.substr(begin, end - begin);
    if (name != "F32" && name != "F64" && name != "BF16" && name != "F16")
      throw Error(d.path() + ": coefficient_dtypes entry " + std::to_string(out.size()) + " is \"" + name.substr(0, 16) +
                  "\", expected F32, F64, BF16 or F16");
    if (int(out.size()) == layers)
      throw Error(d.path() + ": coefficient_dtypes names more dtypes than the " + std::to_string(layers) + " layers");
    out.push_back(name == "F32" ? DType::F32 : name == "F64" ? DType::F64 : name == "BF16" ? DType::BF16 : DType::F16);
    begin = end + 1;
  }
  if (int(out.size()) != layers)
    throw Error(d.path() + ": coefficient_dtypes names " + std::to_string(out.size()) + " dtypes, expected one per layer (" +
                std::to_string(layers) + ")");
  return out;
}

}  // namespace

ExternalDescription parse_describe(const SafetensorsReader& d) {
  ExternalDescription m;
  m.family = answer_text(d, "family");
  m.name = answer_text(d, "name");
  if (m.name.empty() || m.name.size() > 200 ||
      std::any_of(m.name.begin(), m.name.end(), [](char c) { return static_cast<unsigned char>(c) < 32; }))
    throw Error(d.path() + ": name \"" + m.name.substr(0, 60) + "\" must be 1 to 200 printable characters");
  m.description = answer_text(d, "description") + " [external: " + m.family + "]";
  m.model_sha256 = answer_sha256(d, "model_sha256");
  m.config_json = answer_text(d, "config");
  try {
    m.config_json = nlohmann::json::parse(m.config_json).dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error(d.path() + ": config is not valid JSON (" + e.what() + ")");
  }
  m.parameter_count = size_t(answer_integer(d, "parameter_count", 0, int64_t(1) << 50));
  m.vocab = int(answer_integer(d, "vocab", 2, 1 << 24));
  m.max_tokens = int(answer_integer(d, "max_tokens", 1, 1 << 20));
  m.tokenizer = answer_text(d, "tokenizer");
  if (m.tokenizer != "bytes" && m.tokenizer != "ids")
    throw Error(d.path() + ": tokenizer \"" + m.tokenizer + "\", expected \"bytes\" or \"ids\"");
  if (m.tokenizer == "bytes" && m.vocab < 256)
    throw Error(d.path() + ": tokenizer \"bytes\" needs a vocab of at least 256, the adapter says " + std::to_string(m.vocab));
  m.static_profile = answer_text(d, "static_profile");
  m.structure_removed = answer_text(d, "structure_removed");

  CoefficientShape& s = m.shape;
  s.kind = parse_record_kind(d);
  s.layers = int(answer_integer(d, "layers", 1, 1 << 16));
  s.streams = int(answer_integer(d, "streams", 1, 1 << 12));
  s.sources = int(answer_integer(d, "sources", 1, 1 << 16));
  s.tokens = m.max_tokens;
  if (int64_t(s.layers) * s.streams * s.sources > (int64_t(1) << 24))
    throw Error(d.path() + ": coefficient coordinates [" + std::to_string(s.layers) + ", " + std::to_string(s.streams) +
                ", " + std::to_string(s.sources) + "] exceed 2^24 per token");
  // fca allocates a record of [L, T, S, K] float32 per window of every batch and of the cache, at
  // up to max_tokens tokens: a description must not ask for more than any audit could hold.
  if (s.per_window() > kMaxExternalWindowCoefficients)
    throw Error(d.path() + ": a window's coefficients [" + std::to_string(s.layers) + ", " + std::to_string(s.tokens) + ", " +
                std::to_string(s.streams) + ", " + std::to_string(s.sources) + "] (layers, max_tokens, streams, sources) are " +
                std::to_string(s.per_window()) + " values, expected at most 2^30 (4 GiB of float32)");
  if (s.kind == RecordKind::expert_routing) {
    s.categories = int(answer_integer(d, "categories", 2, 1 << 16));
    s.slots = int(answer_integer(d, "slots", 1, s.categories));
    if (s.streams != 1 || s.sources != s.slots)
      throw Error(d.path() + ": expert_routing records are [layer, token, 1, k]: streams must be 1 and sources k = " +
                  std::to_string(s.slots) + ", found " + std::to_string(s.streams) + " and " + std::to_string(s.sources));
  } else if (s.kind == RecordKind::token_selection) {
    s.slots = int(answer_integer(d, "slots", 1, 1));
    s.selected = int(answer_integer(d, "selected", 1, m.max_tokens));
    if (s.streams != 1 || s.sources != 1)
      throw Error(d.path() + ": token_selection records are [layer, token, 1, 1]; found streams " +
                  std::to_string(s.streams) + ", sources " + std::to_string(s.sources));
  } else if (m.structure_removed != "GlobalMean" && m.structure_removed != "SourceUniformMean") {
    throw Error(d.path() + ": structure_removed \"" + m.structure_removed +
                "\"; for continuous records fca computes \"GlobalMean\" or \"SourceUniformMean\"");
  }
  m.coefficient_dtypes = parse_coefficient_dtypes(d, s.layers);
  const int64_t coordinates = int64_t(s.layers) * s.streams * s.sources;
  const TensorInfo& mask = answer_tensor(d, "mask", DType::U8, {s.layers, s.streams, s.sources});
  m.mask.assign(mask.data, mask.data + coordinates);
  if (std::none_of(m.mask.begin(), m.mask.end(), [](uint8_t v) { return v != 0; }))
    throw Error(d.path() + ": the mask marks no coordinate valid");
  if (s.kind == RecordKind::continuous && d.has("identity")) {  // optional: without it, no identity condition
    const TensorInfo& identity = answer_tensor(d, "identity", DType::F32, {s.layers, s.streams, s.sources});
    m.identity.resize(size_t(coordinates));
    std::memcpy(m.identity.data(), identity.data, identity.nbytes);
  }
  return m;
}

std::vector<int32_t> parse_tokenize(const SafetensorsReader& a, const std::string& split, int vocab) {
  const TensorInfo& ids = a.get("ids");
  if (ids.dtype != DType::I32 || ids.shape.size() != 1)
    throw Error(a.path() + ": tensor 'ids' is " + dtype_name(ids.dtype) + " " + shape_string(ids.shape) + ", expected I32 [n]");
  std::vector<int32_t> out(size_t(ids.numel()));
  std::memcpy(out.data(), ids.data, ids.nbytes);
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i] < 0 || out[i] >= vocab)
      throw Error(a.path() + ": token " + std::to_string(i) + " of the " + split + " split is id " +
                  std::to_string(out[i]) + ", outside the vocab [0, " + std::to_string(vocab) + ")");
  return out;
}

RunAnswer parse_run_live(const SafetensorsReader& a, const CoefficientShape& s, int B, int T, double* window_nll,
                         CoefficientTensor* record, int record_first) {
  RunAnswer r;
  r.logits_sha256 = read_nll_and_digest(a, B, window_nll);
  // A live pass runs the controller once per layer of its record: an adapter that reports another
  // count does not count what runs (0: it counts nothing, and its replay count of 0 would then mean
  // nothing either; more: something it counts is not one layer's evaluation).
  r.controller_evaluations = answer_integer(a, "controller_evaluations", 0, int64_t(1) << 50);
  if (r.controller_evaluations != s.layers)
    throw Error(a.path() + ": the adapter reports " + std::to_string(r.controller_evaluations) +
                " controller evaluations for a live pass of " + std::to_string(B) + " windows, expected " +
                std::to_string(s.layers) +
                ", one per controller layer of its record (fca_adapter.HookedAdapter counts each call of a hooked module; "
                "a hand-written Adapter calls count_controller() once per layer's evaluation)");
  const TensorInfo& values = answer_tensor(a, "coefficients", DType::F32, {B, s.layers, T, s.streams, s.sources});
  // Read by copying: the tensor sits at the offset the adapter's header gives it, which need not be
  // a multiple of 4 (a U8 tensor before it), and a float read there would be undefined behaviour.
  for (int64_t i = 0; i < values.numel(); ++i) {
    float v;
    std::memcpy(&v, values.data + i * int64_t(sizeof(float)), sizeof(float));
    if (!std::isfinite(v)) throw Error(a.path() + ": coefficient " + std::to_string(i) + " of the batch is " + std::to_string(v));
  }
  const TensorInfo* discrete = s.slots > 0 ? &answer_tensor(a, "discrete", DType::I32, {B, s.layers, T, s.slots}) : nullptr;
  if (record == nullptr) return r;
  if (record_first + B > record->windows() || record->shape().tokens != T)
    throw Error("external run_live: the record holds " + std::to_string(record->windows()) + " windows of " +
                std::to_string(record->shape().tokens) + " tokens; the batch does not fit");
  const int64_t per = record->shape().per_window(), per_discrete = record->shape().discrete_per_window();
  for (int b = 0; b < B; ++b) {
    std::memcpy(record->window_data(record_first + b), values.data + b * per * int64_t(sizeof(float)), size_t(per) * sizeof(float));
    if (discrete != nullptr)
      std::memcpy(record->window_discrete(record_first + b), discrete->data + b * per_discrete * int64_t(sizeof(int32_t)),
                  size_t(per_discrete) * sizeof(int32_t));
  }
  return r;
}

std::string replayed_coefficients_sha256(const CoefficientTensor& sent, int B, const std::vector<DType>& coefficient_dtypes) {
  const CoefficientShape& s = sent.shape();
  if (int(coefficient_dtypes.size()) != s.layers)
    throw Error("internal error: " + std::to_string(coefficient_dtypes.size()) + " coefficient dtypes for " +
                std::to_string(s.layers) + " layers");
  std::vector<float> used;
  used.reserve(size_t(B) * size_t(s.per_window()));
  for (int b = 0; b < B; ++b)
    for (int l = 0; l < s.layers; ++l) {
      const DType dtype = coefficient_dtypes[size_t(l)];
      for (int t = 0; t < s.tokens; ++t)
        for (int st = 0; st < s.streams; ++st)
          for (int k = 0; k < s.sources; ++k) {
            if (!sent.valid(l, st, k)) continue;
            const float v = sent.at(b, l, t, st, k);
            used.push_back(dtype == DType::BF16 ? round_through_bf16(v) : dtype == DType::F16 ? round_through_f16(v) : v);
          }
    }
  Sha256 hash;
  hash.update(used.data(), used.size() * sizeof(float));
  if (s.slots > 0) hash.update(sent.discrete().data(), size_t(B) * size_t(s.discrete_per_window()) * sizeof(int32_t));
  return hash.hex_digest();
}

RunAnswer parse_run_replay(const SafetensorsReader& a, const CoefficientTensor& sent, int B, double* window_nll,
                           const std::vector<DType>& coefficient_dtypes) {
  RunAnswer r;
  r.logits_sha256 = read_nll_and_digest(a, B, window_nll);
  r.controller_evaluations = answer_integer(a, "controller_evaluations", 0, int64_t(1) << 50);
  // The adapter hashes what its model used (HookedAdapter: what each hooked module returned); it
  // must be what fca sent, as the cast to each layer's dtype leaves it.
  const std::string expected = replayed_coefficients_sha256(sent, B, coefficient_dtypes);
  const std::string used = answer_sha256(a, "coefficients_sha256");
  if (used != expected)
    throw Error(a.path() + ": the adapter's replay used coefficients with SHA-256 " + used.substr(0, 16) + "..., but fca sent " +
                expected.substr(0, 16) + "... (after rounding to the layers' dtypes): the replay must use exactly the "
                "coefficients it is handed (is a hooked module not called, or are its values changed on the way?)");
  return r;
}

ExternalAuditable::ExternalAuditable(const std::string& command, double timeout_s)
    : connection_(std::make_unique<AdapterConnection>(command, timeout_s)),
      model_(parse_describe(connection_->request("describe", {}))) {
  connection_->name_adapter(model_.name);
}

std::vector<int32_t> ExternalAuditable::tokenize(const std::string& split, std::span<const unsigned char> text) const {
  if (model_.tokenizer == "bytes") return std::vector<int32_t>(text.begin(), text.end());
  return parse_tokenize(
      connection_->request("tokenize", {{"text", {int64_t(text.size())}, text.data(), DType::U8}}, {{"split", split}}), split,
      model_.vocab);
}

CoefficientTensor ExternalAuditable::make_coefficients(int windows, int tokens) const {
  const CoefficientShape& shape = model_.shape;
  if (shape.kind == RecordKind::token_selection && tokens != model_.max_tokens)
    throw Error("the adapter's token_selection records select " + std::to_string(shape.selected) + " of " +
                std::to_string(model_.max_tokens) + " tokens; audit it at --seq " + std::to_string(model_.max_tokens) +
                " (found " + std::to_string(tokens) + ")");
  CoefficientShape s = shape;
  s.tokens = tokens;
  CoefficientTensor t(windows, s);
  for (int l = 0; l < s.layers; ++l)
    for (int st = 0; st < s.streams; ++st)
      for (int k = 0; k < s.sources; ++k)
        t.set_valid(l, st, k, model_.mask[(size_t(l) * s.streams + st) * s.sources + k] != 0);
  return t;
}

void ExternalAuditable::run_live(const int32_t* inputs, const int32_t* targets, int B, int T, CoefficientTensor* record,
                                 int record_first, double* window_nll) {
  // Without a record to fill, the pass is the plain live run: `record` 0 asks the adapter to run its
  // model as it runs without fca (a HookedAdapter detaches its hooks), so that exact replay compares
  // the recording pass with the model itself, not with a second recording pass.
  const bool recording = record != nullptr;
  const SafetensorsReader a = connection_->request(
      "run_live", {{"inputs", {B, T}, inputs, DType::I32}, {"targets", {B, T}, targets, DType::I32}}, {{"record", recording ? "1" : "0"}});
  last_digest_ = recording ? parse_run_live(a, model_.shape, B, T, window_nll, record, record_first).logits_sha256
                           : read_nll_and_digest(a, B, window_nll);
}

void ExternalAuditable::run_replay(const int32_t* inputs, const int32_t* targets, int B, int T,
                                   const CoefficientTensor& coefficients, double* window_nll) {
  const CoefficientShape& s = coefficients.shape();
  if (coefficients.windows() < B || s.tokens != T)
    throw Error("external run_replay: " + std::to_string(coefficients.windows()) + " windows of " + std::to_string(s.tokens) +
                " tokens for a batch of " + std::to_string(B) + " x " + std::to_string(T));
  std::vector<TensorToWrite> tensors{{"inputs", {B, T}, inputs, DType::I32},
                                     {"targets", {B, T}, targets, DType::I32},
                                     {"coefficients", {B, s.layers, T, s.streams, s.sources}, coefficients.values().data(), DType::F32}};
  if (s.slots > 0) tensors.push_back({"discrete", {B, s.layers, T, s.slots}, coefficients.discrete().data(), DType::I32});
  const RunAnswer r = parse_run_replay(connection_->request("run_replay", tensors), coefficients, B, window_nll,
                                       model_.coefficient_dtypes);
  last_digest_ = r.logits_sha256;
  replay_evaluations_ += r.controller_evaluations;
}

void ExternalAuditable::identity_profile(CoefficientTensor& out) const {
  const CoefficientShape& s = out.shape();
  for (int l = 0; l < s.layers; ++l)
    for (int t = 0; t < s.tokens; ++t)
      for (int st = 0; st < s.streams; ++st)
        for (int k = 0; k < s.sources; ++k) out.at(0, l, t, st, k) = model_.identity[(size_t(l) * s.streams + st) * s.sources + k];
}

void ExternalAuditable::structure_removed_profile(const CoefficientTensor& static_profile, CoefficientTensor& out) const {
  if (model_.structure_removed == "SourceUniformMean") {
    source_uniform_mean(static_profile, out);
    return;
  }
  // GlobalMean: one scalar, the mean of S over its valid coordinates (S is constant over tokens).
  const CoefficientShape& s = static_profile.shape();
  double sum = 0;
  int64_t n = 0;
  for (int l = 0; l < s.layers; ++l)
    for (int st = 0; st < s.streams; ++st)
      for (int k = 0; k < s.sources; ++k)
        if (static_profile.valid(l, st, k)) {
          sum += static_profile.at(0, l, 0, st, k);
          ++n;
        }
  const float global = float(sum / double(n));
  for (int l = 0; l < s.layers; ++l)
    for (int t = 0; t < s.tokens; ++t)
      for (int st = 0; st < s.streams; ++st)
        for (int k = 0; k < s.sources; ++k) out.at(0, l, t, st, k) = out.valid(l, st, k) ? global : 0.0f;
}

}  // namespace fca
