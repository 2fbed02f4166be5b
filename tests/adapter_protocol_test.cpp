// fca's checks of what an adapter answers (docs/external-protocol.md), on answers made here as
// bytes: the framing, the document, each field and tensor of describe, the run answers and the exec
// answers. Every error names the answer and what was wrong, expected vs found. (The same functions
// run on arbitrary bytes in fuzz/fuzz_adapter_protocol.cpp; the adapters themselves are tested in
// external_test.cpp.)
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/sha256.h"
#include "exec/external_exec.h"
#include "models/external/auditable.h"

namespace fca {
namespace {

const std::string kAdapter = "`python3 adapter.py`";  // how errors name the adapter

// An answer of `type` as the adapter sends it (without its length prefix).
std::string answer(const std::string& type, const std::vector<TensorToWrite>& tensors,
                   std::map<std::string, std::string> metadata = {}) {
  metadata["protocol"] = kExternalProtocol;
  metadata["type"] = type;
  return encode_safetensors(tensors, metadata);
}

// The error `f` throws ("no error" when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// A continuous model of 2 layers, 1 stream, 1 source, 4 tokens, byte ids.
constexpr int kLayers = 2, kTokens = 4, kBatch = 2;
const uint8_t kMask[kLayers] = {1, 1};

std::map<std::string, std::string> describe_fields() {
  return {{"family", "gated-pytorch"}, {"name", "GatedTransformer"}, {"description", "test model"}, {"model_sha256", std::string(64, 'a')},
          {"config", "{\"layers\": 2}"}, {"parameter_count", "100"}, {"vocab", "256"},
          {"max_tokens", std::to_string(kTokens)}, {"tokenizer", "bytes"}, {"record_kind", "continuous"},
          {"layers", std::to_string(kLayers)}, {"streams", "1"}, {"sources", "1"}, {"static_profile", "LayerMean"},
          {"structure_removed", "GlobalMean"}, {"coefficient_dtypes", "F32,F32"}};
}

ExternalDescription describe(const std::map<std::string, std::string>& fields) {
  return parse_describe(
      parse_answer(answer("describe", {{"mask", {kLayers, 1, 1}, kMask, DType::U8}}, fields), "describe", kAdapter));
}

CoefficientShape run_shape() {
  CoefficientShape s;
  s.layers = kLayers;
  s.tokens = kTokens;
  return s;
}

const std::vector<double> kNll = {2.5, 3.0};
const std::vector<float> kCoefficients = [] {
  std::vector<float> v(size_t(kBatch) * kLayers * kTokens);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * float(i);
  return v;
}();

std::string live_answer(const std::vector<int64_t>& coefficients_shape, const std::string& logits_sha256) {
  return answer("run_live",
                {{"nll", {kBatch}, kNll.data(), DType::F64},
                 {"coefficients", coefficients_shape, kCoefficients.data(), DType::F32}},
                {{"logits_sha256", logits_sha256}, {"controller_evaluations", std::to_string(kLayers)}});
}

const std::vector<int64_t> kCoefficientsShape = {kBatch, kLayers, kTokens, 1, 1};
const std::string kDigest = std::string(64, 'b');

RunAnswer parse_live(const std::string& bytes, CoefficientTensor* record = nullptr) {
  std::vector<double> nll(kBatch);
  return parse_run_live(parse_answer(bytes, "run_live", kAdapter), run_shape(), kBatch, kTokens, nll.data(), record, 0);
}

// The coefficients sent to a replay, and their SHA-256 as the adapter computes it.
CoefficientTensor sent_coefficients() {
  CoefficientTensor sent(kBatch, run_shape());
  std::memcpy(sent.values().data(), kCoefficients.data(), kCoefficients.size() * sizeof(float));
  return sent;
}

std::string replay_answer(const std::string& coefficients_sha256) {
  return answer("run_replay", {{"nll", {kBatch}, kNll.data(), DType::F64}},
                {{"logits_sha256", kDigest}, {"controller_evaluations", "0"}, {"coefficients_sha256", coefficients_sha256}});
}

RunAnswer parse_replay(const std::string& bytes, const std::vector<DType>& dtypes = {DType::F32, DType::F32},
                       const CoefficientTensor& sent = sent_coefficients()) {
  std::vector<double> nll(kBatch);
  return parse_run_replay(parse_answer(bytes, "run_replay", kAdapter), sent, kBatch, nll.data(), dtypes);
}

std::string sha256_of(const void* data, size_t bytes) {
  Sha256 h;
  h.update(data, bytes);
  return h.hex_digest();
}

TEST(AdapterProtocol, WellFormedAnswersAreRead) {
  const ExternalDescription d = describe(describe_fields());
  EXPECT_EQ(d.description, "test model [external: gated-pytorch]");
  EXPECT_EQ(d.name, "GatedTransformer");
  EXPECT_EQ(d.shape.layers, kLayers);
  EXPECT_EQ(d.max_tokens, kTokens);
  CoefficientTensor record(kBatch, run_shape());
  const RunAnswer live = parse_live(live_answer(kCoefficientsShape, kDigest), &record);
  EXPECT_EQ(live.logits_sha256, kDigest);
  EXPECT_EQ(live.controller_evaluations, kLayers);
  EXPECT_EQ(record.values(), kCoefficients);
  const RunAnswer replay = parse_replay(replay_answer(sha256_of(kCoefficients.data(), kCoefficients.size() * sizeof(float))));
  EXPECT_EQ(replay.controller_evaluations, 0);
}

TEST(AdapterProtocol, FramingLengthIsChecked) {
  EXPECT_NE(error_of([] { check_answer_length(3, "describe", kAdapter); })
                .find("`python3 adapter.py` answered describe with a message of 3 bytes (expected 8 .. 4294967296)"),
            std::string::npos);
  EXPECT_NE(error_of([] { check_answer_length(uint64_t(1) << 40, "run_live", kAdapter); }).find("1099511627776 bytes"),
            std::string::npos);
  EXPECT_EQ(error_of([] { check_answer_length(8, "describe", kAdapter); }), "no error");
}

TEST(AdapterProtocol, MalformedJsonAnswer) {
  // The safetensors header: 8 bytes of length, then JSON that ends early.
  const std::string text = "{\"__metadata__\": {\"type\": ";
  std::string bytes(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += text;
  EXPECT_NE(error_of([&] { parse_answer(bytes, "describe", kAdapter); })
                .find("`python3 adapter.py` answer to describe: header is not valid JSON"),
            std::string::npos);
  // JSON text inside the fields: describe's config, exec_prepare's modes, exec_pass's counts.
  auto fields = describe_fields();
  fields["config"] = "{\"layers\": 2";
  EXPECT_NE(error_of([&] { describe(fields); }).find("answer to describe: config is not valid JSON"), std::string::npos);
  const std::string prepare = answer("exec_prepare", {}, {{"modes", "[{\"mode\": \"live\"},"}, {"device", "cpu"},
                                                           {"timer", "perf_counter"}, {"threads", "2"}, {"units", "{}"}});
  EXPECT_NE(error_of([&] { parse_exec_prepare(parse_answer(prepare, "exec_prepare", kAdapter)); })
                .find("answer to exec_prepare: modes is not valid JSON"),
            std::string::npos);
  const std::string pass =
      answer("exec_pass", {{"nll", {kBatch}, kNll.data(), DType::F64}}, {{"logits_sha256", kDigest}, {"counts", "{\"gemm_flops\": 1"}});
  std::vector<double> nll(kBatch);
  nlohmann::ordered_json counted;
  EXPECT_NE(error_of([&] {
              parse_exec_pass(parse_answer(pass, "exec_pass", kAdapter), "live", 0, kBatch, nll.data(), &counted,
                              nlohmann::ordered_json::object(), kBatch * kTokens);
            }).find("answer to exec_pass (mode live): counts is not valid JSON"),
            std::string::npos);
}

TEST(AdapterProtocol, TruncatedSafetensors) {
  const std::string whole = live_answer(kCoefficientsShape, kDigest);
  // Cut inside the tensor data: the last tensor's data_offsets run past what arrived.
  const std::string cut = whole.substr(0, whole.size() - 5);
  const std::string e = error_of([&] { parse_answer(cut, "run_live", kAdapter); });
  EXPECT_NE(e.find("`python3 adapter.py` answer to run_live: tensor 'coefficients': data_offsets [16, 80) outside the data "
                   "section of 75 bytes (truncated file?)"),
            std::string::npos)
      << e;
  // Cut inside the JSON header, and before the header's length is complete.
  EXPECT_NE(error_of([&] { parse_answer(whole.substr(0, 40), "run_live", kAdapter); }).find("exceeds the file (40 bytes)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_answer(whole.substr(0, 5), "run_live", kAdapter); }).find("truncated safetensors file (5 bytes"),
            std::string::npos);
}

TEST(AdapterProtocol, WrongTensorShapes) {
  // One token too few in the coefficients (a model cutting its last position).
  EXPECT_NE(error_of([] { parse_live(live_answer({kBatch, kLayers, kTokens - 1, 1, 1}, kDigest)); })
                .find("answer to run_live: tensor 'coefficients' is F32 [2, 2, 3, 1, 1], expected F32 [2, 2, 4, 1, 1]"),
            std::string::npos);
  // NLL per token instead of per window.
  const std::vector<double> per_token(size_t(kBatch) * kTokens, 1.0);
  const std::string nll_per_token = answer("run_live", {{"nll", {kBatch, kTokens}, per_token.data(), DType::F64}},
                                           {{"logits_sha256", kDigest}, {"controller_evaluations", "2"}});
  EXPECT_NE(error_of([&] { parse_live(nll_per_token); }).find("tensor 'nll' is F64 [2, 4], expected F64 [2]"), std::string::npos);
  // The logits digest of the wrong length: not a SHA-256 of the logits at all.
  EXPECT_NE(error_of([] { parse_live(live_answer(kCoefficientsShape, std::string(40, 'c'))); })
                .find("answer to run_live: logits_sha256 \"" + std::string(40, 'c') + "\" is not 64 lowercase hex digits"),
            std::string::npos);
  // The describe's mask of another shape than [L, S, K].
  const uint8_t mask[3] = {1, 1, 1};
  EXPECT_NE(error_of([&] {
              parse_describe(parse_answer(answer("describe", {{"mask", {3, 1, 1}, mask, DType::U8}}, describe_fields()),
                                          "describe", kAdapter));
            }).find("tensor 'mask' is U8 [3, 1, 1], expected U8 [2, 1, 1]"),
            std::string::npos);
}

TEST(AdapterProtocol, TensorsAtUnalignedOffsetsAreRead) {
  // A one-byte tensor first puts nll at data offset 1 and the coefficients at 17: valid safetensors
  // (the format does not align tensors), and once read as floats in place (undefined behaviour,
  // reported by make test-sanitize's UBSan as a misaligned load).
  const uint8_t note = 7;
  const std::string bytes = answer("run_live",
                                   {{"note", {1}, &note, DType::U8},
                                    {"nll", {kBatch}, kNll.data(), DType::F64},
                                    {"coefficients", kCoefficientsShape, kCoefficients.data(), DType::F32}},
                                   {{"logits_sha256", kDigest}, {"controller_evaluations", std::to_string(kLayers)}});
  CoefficientTensor record(kBatch, run_shape());
  EXPECT_EQ(parse_live(bytes, &record).logits_sha256, kDigest);
  EXPECT_EQ(record.values(), kCoefficients);
  // A non-finite coefficient there is found and named.
  std::vector<float> bad = kCoefficients;
  bad[5] = std::numeric_limits<float>::infinity();
  const std::string with_inf = answer("run_live",
                                      {{"note", {1}, &note, DType::U8},
                                       {"nll", {kBatch}, kNll.data(), DType::F64},
                                       {"coefficients", kCoefficientsShape, bad.data(), DType::F32}},
                                      {{"logits_sha256", kDigest}, {"controller_evaluations", std::to_string(kLayers)}});
  EXPECT_NE(error_of([&] { parse_live(with_inf); }).find("answer to run_live: coefficient 5 of the batch is inf"), std::string::npos);
}

TEST(AdapterProtocol, DescriptionAsksForMoreThanAWindowCanHold) {
  // Each field in its range (2^24 coordinates per token, 2^20 tokens), their product 2^44 values a
  // window: refused before anything of that size is allocated.
  auto fields = describe_fields();
  fields["layers"] = "4096";
  fields["sources"] = "4096";
  fields["max_tokens"] = "1048576";
  EXPECT_NE(error_of([&] { describe(fields); })
                .find("answer to describe: a window's coefficients [4096, 1048576, 1, 4096] (layers, max_tokens, streams, "
                      "sources) are 17592186044416 values, expected at most 2^30"),
            std::string::npos);
}

TEST(AdapterProtocol, LyingCoefficientsDigest) {
  // The replay claims coefficients other than those fca sent (the hash of a record off in one value).
  std::vector<float> other = kCoefficients;
  other[3] += 1.0f;
  const std::string claimed = sha256_of(other.data(), other.size() * sizeof(float));
  const std::string sent = sha256_of(kCoefficients.data(), kCoefficients.size() * sizeof(float));
  const std::string e = error_of([&] { parse_replay(replay_answer(claimed)); });
  EXPECT_NE(e.find("answer to run_replay: the adapter's replay used coefficients with SHA-256 " + claimed.substr(0, 16) +
                   "..., but fca sent " + sent.substr(0, 16) + "..."),
            std::string::npos)
      << e;
  // A digest that is no SHA-256 at all is named as such.
  EXPECT_NE(error_of([] { parse_replay(replay_answer("not-a-digest")); })
                .find("answer to run_replay: coefficients_sha256 \"not-a-digest\" is not 64 lowercase hex digits"),
            std::string::npos);
}

TEST(AdapterProtocol, TheModelsNameIsPrintable) {
  auto fields = describe_fields();
  fields["name"] = "";
  EXPECT_NE(error_of([&] { describe(fields); }).find("name \"\" must be 1 to 200 printable characters"), std::string::npos);
  fields["name"] = "Gated\nModel";
  EXPECT_NE(error_of([&] { describe(fields); }).find("must be 1 to 200 printable characters"), std::string::npos);
  fields.erase("name");
  EXPECT_NE(error_of([&] { describe(fields); }).find("metadata field \"name\" is missing"), std::string::npos);
}

TEST(AdapterProtocol, CoefficientDtypesAreOnePerLayer) {
  auto fields = describe_fields();
  fields["coefficient_dtypes"] = "BF16,F16";
  EXPECT_EQ(describe(fields).coefficient_dtypes, (std::vector<DType>{DType::BF16, DType::F16}));
  fields["coefficient_dtypes"] = "F32";
  EXPECT_NE(error_of([&] { describe(fields); }).find("coefficient_dtypes names 1 dtypes, expected one per layer (2)"),
            std::string::npos);
  fields["coefficient_dtypes"] = "F32,F32,F32";
  EXPECT_NE(error_of([&] { describe(fields); }).find("coefficient_dtypes names more dtypes than the 2 layers"), std::string::npos);
  fields["coefficient_dtypes"] = "F32,F8";
  EXPECT_NE(error_of([&] { describe(fields); }).find("coefficient_dtypes entry 1 is \"F8\", expected F32, F64, BF16 or F16"),
            std::string::npos);
  fields.erase("coefficient_dtypes");
  EXPECT_NE(error_of([&] { describe(fields); }).find("metadata field \"coefficient_dtypes\" is missing"), std::string::npos);
}

// What a 16-bit model uses is fca's float32 coefficient rounded to its dtype: the digest fca expects
// is of those rounded values, per layer, at valid coordinates only.
TEST(AdapterProtocol, ReplayDigestIsOfTheValuesAfterEachLayersCast) {
  CoefficientTensor sent = sent_coefficients();  // 0.1 i: none of them a bf16 or f16 value but 0
  std::vector<float> used;                         // [B, L, T]: layer 0 bf16, layer 1 f16
  for (int b = 0; b < kBatch; ++b)
    for (int l = 0; l < kLayers; ++l)
      for (int t = 0; t < kTokens; ++t) {
        const float v = sent.at(b, l, t, 0, 0);
        used.push_back(l == 0 ? round_through_bf16(v) : round_through_f16(v));
      }
  const std::vector<DType> dtypes{DType::BF16, DType::F16};
  const std::string rounded = sha256_of(used.data(), used.size() * sizeof(float));
  EXPECT_EQ(replayed_coefficients_sha256(sent, kBatch, dtypes), rounded);
  EXPECT_EQ(parse_replay(replay_answer(rounded), dtypes, sent).controller_evaluations, 0);
  // An adapter reporting the float32 values it was sent, not what its 16-bit model used, is refused.
  const std::string unrounded = sha256_of(kCoefficients.data(), kCoefficients.size() * sizeof(float));
  EXPECT_NE(error_of([&] { parse_replay(replay_answer(unrounded), dtypes, sent); })
                .find("(after rounding to the layers' dtypes)"),
            std::string::npos);
  // Invalid coordinates are not hashed: layer 1 invalid leaves layer 0's values only.
  sent.set_valid(1, 0, 0, false);
  std::vector<float> layer0;
  for (int b = 0; b < kBatch; ++b)
    for (int t = 0; t < kTokens; ++t) layer0.push_back(sent.at(b, 0, t, 0, 0));
  EXPECT_EQ(replayed_coefficients_sha256(sent, kBatch, {DType::F32, DType::F32}),
            sha256_of(layer0.data(), layer0.size() * sizeof(float)));
}

TEST(AdapterProtocol, ErrorAnswerTypeAndProtocolAreNamed) {
  EXPECT_NE(error_of([] { parse_answer(answer("error", {}, {{"message", "RuntimeError: boom"}}), "run_live", kAdapter); })
                .find("`python3 adapter.py` failed on run_live: RuntimeError: boom"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_answer(answer("run_replay", {}), "run_live", kAdapter); })
                .find("answer to run_live: type \"run_replay\", expected \"run_live\""),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_answer(encode_safetensors({}, {{"type", "describe"}, {"protocol", "v0"}}), "describe", kAdapter); })
                .find("answer to describe: protocol \"v0\", expected \"fca-external-v1\""),
            std::string::npos);
}

}  // namespace
}  // namespace fca
