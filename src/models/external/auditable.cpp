#include "models/external/auditable.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include "core/json.h"

#include "core/error.h"
#include "core/sha256.h"

namespace fca {
namespace {

RecordKind parse_record_kind(const SafetensorsReader& answer) {
  const std::string kind = answer_text(answer, "record_kind");
  for (RecordKind k : {RecordKind::continuous, RecordKind::expert_routing, RecordKind::token_selection})
    if (kind == record_kind_name(k)) return k;
  throw Error(answer.path() + ": record_kind \"" + kind + "\", expected continuous, expert_routing or token_selection");
}

}  // namespace

ExternalAuditable::ExternalAuditable(const std::string& command, double timeout_s)
    : connection_(std::make_unique<AdapterConnection>(command, timeout_s)) {
  const SafetensorsReader d = connection_->request("describe", {});
  adapter_family_ = answer_text(d, "family");
  description_ = answer_text(d, "description") + " [external: " + adapter_family_ + "]";
  model_sha256_ = answer_sha256(d, "model_sha256");
  config_json_ = answer_text(d, "config");
  try {
    config_json_ = nlohmann::json::parse(config_json_).dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error(d.path() + ": config is not valid JSON (" + e.what() + ")");
  }
  parameter_count_ = size_t(answer_integer(d, "parameter_count", 0, int64_t(1) << 50));
  vocab_ = int(answer_integer(d, "vocab", 2, 1 << 24));
  max_tokens_ = int(answer_integer(d, "max_tokens", 1, 1 << 20));
  tokenizer_ = answer_text(d, "tokenizer");
  if (tokenizer_ != "bytes" && tokenizer_ != "ids")
    throw Error(d.path() + ": tokenizer \"" + tokenizer_ + "\", expected \"bytes\" or \"ids\"");
  if (tokenizer_ == "bytes" && vocab_ < 256)
    throw Error(d.path() + ": tokenizer \"bytes\" needs a vocab of at least 256, the adapter says " + std::to_string(vocab_));
  static_profile_ = answer_text(d, "static_profile");
  structure_removed_ = answer_text(d, "structure_removed");

  shape_.kind = parse_record_kind(d);
  shape_.layers = int(answer_integer(d, "layers", 1, 1 << 16));
  shape_.streams = int(answer_integer(d, "streams", 1, 1 << 12));
  shape_.sources = int(answer_integer(d, "sources", 1, 1 << 16));
  shape_.tokens = max_tokens_;
  if (int64_t(shape_.layers) * shape_.streams * shape_.sources > (int64_t(1) << 24))
    throw Error(d.path() + ": coefficient coordinates [" + std::to_string(shape_.layers) + ", " + std::to_string(shape_.streams) +
                ", " + std::to_string(shape_.sources) + "] exceed 2^24 per token");
  if (shape_.kind == RecordKind::expert_routing) {
    shape_.categories = int(answer_integer(d, "categories", 2, 1 << 16));
    shape_.slots = int(answer_integer(d, "slots", 1, shape_.categories));
    if (shape_.streams != 1 || shape_.sources != shape_.slots)
      throw Error(d.path() + ": expert_routing records are [layer, token, 1, k]: streams must be 1 and sources k = " +
                  std::to_string(shape_.slots) + ", found " + std::to_string(shape_.streams) + " and " + std::to_string(shape_.sources));
  } else if (shape_.kind == RecordKind::token_selection) {
    shape_.slots = int(answer_integer(d, "slots", 1, 1));
    shape_.selected = int(answer_integer(d, "selected", 1, max_tokens_));
    if (shape_.streams != 1 || shape_.sources != 1)
      throw Error(d.path() + ": token_selection records are [layer, token, 1, 1]; found streams " +
                  std::to_string(shape_.streams) + ", sources " + std::to_string(shape_.sources));
  } else if (structure_removed_ != "GlobalMean" && structure_removed_ != "SourceUniformMean") {
    throw Error(d.path() + ": structure_removed \"" + structure_removed_ +
                "\"; for continuous records fca computes \"GlobalMean\" or \"SourceUniformMean\"");
  }
  const int64_t coordinates = int64_t(shape_.layers) * shape_.streams * shape_.sources;
  const TensorInfo& mask = answer_tensor(d, "mask", DType::U8, {shape_.layers, shape_.streams, shape_.sources});
  mask_.assign(mask.data, mask.data + coordinates);
  if (std::none_of(mask_.begin(), mask_.end(), [](uint8_t v) { return v != 0; }))
    throw Error(d.path() + ": the mask marks no coordinate valid");
  if (shape_.kind == RecordKind::continuous && d.has("identity")) {  // optional: without it, no identity condition
    const TensorInfo& identity = answer_tensor(d, "identity", DType::F32, {shape_.layers, shape_.streams, shape_.sources});
    identity_.resize(size_t(coordinates));
    std::memcpy(identity_.data(), identity.data, identity.nbytes);
  }
}

std::vector<int32_t> ExternalAuditable::tokenize(const std::string& split, std::span<const unsigned char> text) const {
  if (tokenizer_ == "bytes") return std::vector<int32_t>(text.begin(), text.end());
  const SafetensorsReader a = connection_->request(
      "tokenize", {{"text", {int64_t(text.size())}, text.data(), DType::U8}}, {{"split", split}});
  const TensorInfo& ids = a.get("ids");
  if (ids.dtype != DType::I32 || ids.shape.size() != 1)
    throw Error(a.path() + ": tensor 'ids' is " + dtype_name(ids.dtype) + " " + shape_string(ids.shape) + ", expected I32 [n]");
  std::vector<int32_t> out(size_t(ids.numel()));
  std::memcpy(out.data(), ids.data, ids.nbytes);
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i] < 0 || out[i] >= vocab_)
      throw Error(a.path() + ": token " + std::to_string(i) + " of the " + split + " split is id " +
                  std::to_string(out[i]) + ", outside the vocab [0, " + std::to_string(vocab_) + ")");
  return out;
}

CoefficientTensor ExternalAuditable::make_coefficients(int windows, int tokens) const {
  if (shape_.kind == RecordKind::token_selection && tokens != max_tokens_)
    throw Error("the adapter's token_selection records select " + std::to_string(shape_.selected) + " of " +
                std::to_string(max_tokens_) + " tokens; audit it at --seq " + std::to_string(max_tokens_) +
                " (found " + std::to_string(tokens) + ")");
  CoefficientShape s = shape_;
  s.tokens = tokens;
  CoefficientTensor t(windows, s);
  for (int l = 0; l < s.layers; ++l)
    for (int st = 0; st < s.streams; ++st)
      for (int k = 0; k < s.sources; ++k) t.set_valid(l, st, k, mask_[(size_t(l) * s.streams + st) * s.sources + k] != 0);
  return t;
}

void ExternalAuditable::read_run_answer(const SafetensorsReader& a, int B, double* window_nll) {
  const TensorInfo& nll = answer_tensor(a, "nll", DType::F64, {B});
  std::memcpy(window_nll, nll.data, nll.nbytes);
  for (int b = 0; b < B; ++b)
    if (!std::isfinite(window_nll[b]))
      throw Error(a.path() + ": window " + std::to_string(b) + " of the batch has NLL " + std::to_string(window_nll[b]));
  last_digest_ = answer_sha256(a, "logits_sha256");
}

void ExternalAuditable::run_live(const int32_t* inputs, const int32_t* targets, int B, int T, CoefficientTensor* record,
                                 int record_first, double* window_nll) {
  const SafetensorsReader a = connection_->request(
      "run_live", {{"inputs", {B, T}, inputs, DType::I32}, {"targets", {B, T}, targets, DType::I32}});
  read_run_answer(a, B, window_nll);
  // A live pass runs the controller once per layer of its record: an adapter that reports another
  // count does not count what runs (0: it counts nothing, and its replay count of 0 would then mean
  // nothing either; more: something it counts is not one layer's evaluation).
  const int64_t evaluations = answer_integer(a, "controller_evaluations", 0, int64_t(1) << 50);
  if (evaluations != shape_.layers)
    throw Error(a.path() + ": the adapter reports " + std::to_string(evaluations) + " controller evaluations for a live pass of " +
                std::to_string(B) + " windows, expected " + std::to_string(shape_.layers) +
                ", one per controller layer of its record (fca_adapter.HookedAdapter counts each call of a hooked module; "
                "a hand-written Adapter calls count_controller() once per layer's evaluation)");
  live_evaluations_ += evaluations;
  const CoefficientShape& s = shape_;
  const TensorInfo& values = answer_tensor(a, "coefficients", DType::F32, {B, s.layers, T, s.streams, s.sources});
  const float* v = reinterpret_cast<const float*>(values.data);  // the reader's buffer: new-allocated, aligned
  for (int64_t i = 0; i < values.numel(); ++i)
    if (!std::isfinite(v[i]))
      throw Error(a.path() + ": coefficient " + std::to_string(i) + " of the batch is " + std::to_string(v[i]));
  const TensorInfo* discrete = s.slots > 0 ? &answer_tensor(a, "discrete", DType::I32, {B, s.layers, T, s.slots}) : nullptr;
  if (record == nullptr) return;
  if (record_first + B > record->windows() || record->shape().tokens != T)
    throw Error("external run_live: the record holds " + std::to_string(record->windows()) + " windows of " +
                std::to_string(record->shape().tokens) + " tokens; the batch does not fit");
  const int64_t per = record->shape().per_window(), per_discrete = record->shape().discrete_per_window();
  for (int b = 0; b < B; ++b) {
    std::memcpy(record->window_data(record_first + b), v + b * per, size_t(per) * sizeof(float));
    if (discrete != nullptr)
      std::memcpy(record->window_discrete(record_first + b), discrete->data + b * per_discrete * 4,
                  size_t(per_discrete) * sizeof(int32_t));
  }
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
  const SafetensorsReader a = connection_->request("run_replay", tensors);
  read_run_answer(a, B, window_nll);
  replay_evaluations_ += answer_integer(a, "controller_evaluations", 0, int64_t(1) << 50);
  // The adapter hashes the coefficients it used (the record its forward returns); they must be the
  // ones sent: values F32 [B, L, T, S, K] then, for routing records, discrete I32 [B, L, T, slots].
  Sha256 sent;
  sent.update(coefficients.values().data(), size_t(B) * size_t(s.per_window()) * sizeof(float));
  if (s.slots > 0) sent.update(coefficients.discrete().data(), size_t(B) * size_t(s.discrete_per_window()) * sizeof(int32_t));
  const std::string expected = sent.hex_digest(), used = answer_text(a, "coefficients_sha256");
  if (used != expected)
    throw Error(a.path() + ": the adapter's replay used coefficients with SHA-256 " + used.substr(0, 16) + "..., but fca sent " +
                expected.substr(0, 16) + "...: the replay must use exactly the coefficients it is handed (is a hooked "
                "module not called, or called with other values?)");
}

void ExternalAuditable::identity_profile(CoefficientTensor& out) const {
  const CoefficientShape& s = out.shape();
  for (int l = 0; l < s.layers; ++l)
    for (int t = 0; t < s.tokens; ++t)
      for (int st = 0; st < s.streams; ++st)
        for (int k = 0; k < s.sources; ++k) out.at(0, l, t, st, k) = identity_[(size_t(l) * s.streams + st) * s.sources + k];
}

void ExternalAuditable::structure_removed_profile(const CoefficientTensor& static_profile, CoefficientTensor& out) const {
  if (structure_removed_ == "SourceUniformMean") {
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
