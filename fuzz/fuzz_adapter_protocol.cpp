// fca's side of the adapter protocol (docs/external-protocol.md) on arbitrary bytes. The input is
// what an adapter writes to its stdout: the answers to the requests an audit and an exec send, in
// this order: describe; tokenize (test split) when the tokenizer is "ids"; run_live of a batch of
// kBatch windows of max_tokens tokens; run_replay of the coefficients that live answer recorded;
// exec_prepare; one counted exec_pass per offered mode; exec_time. Each answer is framed by its
// 8-byte length and goes through every check fca applies to it (framing, safetensors document,
// protocol and type, each field and tensor), as AdapterConnection::request and its callers do.
// The input running out stands for an adapter that exits (an fca::Error in fca too).
// Seeds: scripts/fuzz.sh records these answers from fca_adapter adapters (continuous, routing,
// token selection, tokenized; hooked and hand-written; tensors at unaligned offsets; an error).
#include <cstring>
#include <string>
#include <vector>

#include "exec/external_exec.h"
#include "fuzz_util.h"
#include "models/external/auditable.h"

namespace {

const std::string kCommand = "fuzz-adapter";
// The harness's batch, and its bound on one batch's coefficients (fca allocates what a description
// allows, up to kMaxExternalWindowCoefficients a window; the fuzzer's memory limit is far below).
constexpr int kBatch = 2;
constexpr int64_t kMaxBatchCoefficients = int64_t(1) << 16;

class Answers {
 public:
  Answers(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  // The next answer, to a request of `type`, read as AdapterConnection::request reads it.
  fca::SafetensorsReader next(const std::string& type) {
    uint64_t length = 0;
    if (size_ - at_ < 8) throw fca::Error("the adapter exited before answering " + type);
    std::memcpy(&length, data_ + at_, 8);
    at_ += 8;
    fca::check_answer_length(length, type, kCommand);
    if (length > size_ - at_) throw fca::Error("the adapter exited in its answer to " + type);
    std::string bytes(reinterpret_cast<const char*>(data_ + at_), size_t(length));
    at_ += size_t(length);
    return fca::parse_answer(std::move(bytes), type, kCommand);
  }

 private:
  const uint8_t* data_;
  size_t size_, at_ = 0;
};

void converse(Answers& answers) {
  const fca::ExternalDescription model = fca::parse_describe(answers.next("describe"));
  if (model.tokenizer == "ids") (void)fca::parse_tokenize(answers.next("tokenize"), "test", model.vocab);

  fca::CoefficientShape shape = model.shape;
  const int T = model.max_tokens;
  shape.tokens = T;
  if (kBatch * shape.per_window() > kMaxBatchCoefficients) return;
  fca::CoefficientTensor record(kBatch, shape);
  std::vector<double> nll(kBatch);
  (void)fca::parse_run_live(answers.next("run_live"), shape, kBatch, T, nll.data(), &record, 0);
  (void)fca::parse_run_replay(answers.next("run_replay"), record, kBatch, nll.data(), model.coefficient_dtypes);

  const fca::ExternalExecSetup setup = fca::parse_exec_prepare(answers.next("exec_prepare"));
  for (const std::string& mode : setup.modes) {
    nlohmann::ordered_json counted;
    (void)fca::parse_exec_pass(answers.next("exec_pass"), mode, 0, kBatch, nll.data(), &counted, setup.units,
                               int64_t(kBatch) * T);
    (void)counted.dump();
  }
  (void)fca::external_seconds(answers.next("exec_time"));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Answers answers(data, size);
  fca::fuzz::expect_ok_or_error([&] { converse(answers); });
  return 0;
}
