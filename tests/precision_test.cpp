// The bf16 precision (ops/onednn_matmul.h): both operands of every float GEMM rounded to bf16,
// fp32 accumulation; the audit in bf16 replays exactly, records its precision, refuses a cache of
// the other precision, and stays within a stated bound of the fp32 audit of the same model.
#include <gtest/gtest.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "audit/plan.h"
#include "audit_fixture.h"
#include "core/half.h"
#include "ops/gemm.h"
#include "ops/onednn_matmul.h"
#include "ops/provenance.h"
#include "ops/simd.h"
#include "test_util.h"

namespace fca {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed) { return testing::uniform_values(n, seed); }

TEST(Precision, VectorRoundingIsTheScalarDefinitionOnEveryTarget) {
  // Ties both ways, the carry into the exponent, the largest finite values (which round to inf),
  // infinities, NaNs of both signs and payloads, subnormals, and random bit patterns; on every SIMD
  // target compiled in and supported here, through the parallel blocks of round_to_bf16 (2^20
  // values) and through the vector tails (the first 1 .. 40 values alone).
  std::vector<uint32_t> bits{0x00000000, 0x80000000, 0x3F808000, 0x3F818000, 0x3F80FFFF, 0x3FFFFFFF, 0x7F7FFFFF, 0xFF7FFFFF,
                             0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001, 0xFF80FFFF, 0x00000001, 0x807FFFFF};
  std::mt19937 rng(7);
  while (bits.size() < (size_t(1) << 20) + 5) bits.push_back(uint32_t(rng()));
  std::vector<float> values(bits.size());
  std::memcpy(values.data(), bits.data(), sizeof(float) * bits.size());
  std::vector<uint16_t> want(values.size());
  for (size_t i = 0; i < values.size(); ++i) want[i] = f32_to_bf16(values[i]);
  set_threads(2);
  for (const auto& target : simd::available_targets()) {
    simd::force_target(target.bit);
    SCOPED_TRACE(target.name);
    std::vector<uint16_t> rounded(values.size(), 0xABCD);
    round_to_bf16(rounded.data(), values.data(), int64_t(values.size()));
    for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(rounded[i], want[i]) << std::hex << bits[i];
    for (int n = 1; n <= 40; ++n) {
      std::vector<uint16_t> head(size_t(n) + 1, 0xABCD);
      simd::round_to_bf16(head.data(), values.data(), n);
      ASSERT_EQ(0, std::memcmp(head.data(), want.data(), sizeof(uint16_t) * size_t(n))) << n;
      ASSERT_EQ(head[size_t(n)], 0xABCD) << "written past " << n;
    }
  }
  simd::force_target(0);
}

TEST(Precision, Bf16ProductsAreTheProductsOfTheRoundedOperands) {
  const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
  set_threads(2);
  for (const auto [M, N, K] : {std::array<int, 3>{45, 300, 520}, std::array<int, 3>{1, 2, 40}, std::array<int, 3>{70, 8, 2100}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE(std::to_string(M) + " x " + std::to_string(N) + " x " + std::to_string(K) + " ta " + std::to_string(ta) +
                     " tb " + std::to_string(tb));
        const int lda = ta ? M + 3 : K + 5, ldb = tb ? K + 2 : N + 7, ldc = N + 1;
        const auto a = random_values(size_t(ta ? K : M) * lda, 1), b = random_values(size_t(tb ? N : K) * ldb, 2);
        auto c = random_values(size_t(M) * ldc, 3);
        const auto c0 = c;
        gemm<float>(ta, tb, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, 1.0f, c.data(), ldc);
        double worst = 0, worst_unrounded = 0;
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) {
            double want = c0[size_t(i) * ldc + j], unrounded = want;
            for (int p = 0; p < K; ++p) {
              const float x = ta ? a[size_t(p) * lda + i] : a[size_t(i) * lda + p];
              const float y = tb ? b[size_t(j) * ldb + p] : b[size_t(p) * ldb + j];
              want += double(round_through_bf16(x)) * double(round_through_bf16(y));
              unrounded += double(x) * double(y);
            }
            worst = std::max(worst, std::abs(double(c[size_t(i) * ldc + j]) - want));
            worst_unrounded = std::max(worst_unrounded, std::abs(double(c[size_t(i) * ldc + j]) - unrounded));
          }
        // The exact products of bf16 values are fp32-exact (8 + 8 significant bits); what remains
        // is fp32 accumulation: sums of up to 2100 products in [-1, 1] (size ~ sqrt(K) / 3 ~ 15),
        // rounding 2100 * 2^-24 * 15 = 1.9e-3 at worst, typically 100x less.
        EXPECT_LT(worst, 2e-3);
        // And it is bf16: unrounded operands differ by ~ sqrt(K) * 2^-9 / 3 per value at least.
        if (K >= 40) {
          EXPECT_GT(worst_unrounded, 1e-3);
        }
        for (int i = 0; i < M; ++i) ASSERT_EQ(c[size_t(i) * ldc + N], c0[size_t(i) * ldc + N]) << "padding written";
      }
}

TEST(Precision, ProvenanceNamesThePrecisionAndTheGemmPath) {
  EXPECT_EQ(provenance_base()["precision"], "fp32");
  EXPECT_NE(build_description().find("oneDNN"), std::string::npos) << build_description();
  const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
  EXPECT_EQ(provenance_base()["precision"], "bf16");
  EXPECT_NE(build_description().find("sgemm bf16 oneDNN"), std::string::npos) << build_description();
  EXPECT_THROW(parse_matmul_precision("fp16", "--precision"), Error);
}

// CPU time (user + system clock ticks) of each thread of this process, by thread id
// (/proc/self/task/<tid>/stat, fields 14 and 15).
std::map<int, long> thread_cpu_ticks() {
  std::map<int, long> ticks;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "stat");
    std::string line;
    std::getline(in, line);
    std::istringstream fields(line.substr(line.rfind(')') + 2));  // from field 3, after the command name
    std::string skip;
    for (int field = 3; field < 14; ++field) fields >> skip;
    long user = 0, system = 0;
    fields >> user >> system;
    ticks[std::stoi(task.path().filename().string())] = user + system;
  }
  return ticks;
}

TEST(Precision, OnednnRunsOnTheThreadCountOfTheCall) {
  // fca caches oneDNN's primitives by shape, not by thread count: a product first run on 2 threads
  // and then, with the same shape, under set_threads(1) must run on this thread alone (--threads
  // 1), not on 2. Checked by the CPU time the process's other threads take meanwhile: a second
  // worker takes about as much as this one (measured: 13 ticks each with the thread count left at
  // 2), while the pool's threads spin only a few milliseconds after their last region.
  const int n = 1536;  // 7.2 GFLOP per product: about 0.05 s per product on one core
  const auto a = random_values(size_t(n) * n, 11), b = random_values(size_t(n) * n, 12);
  std::vector<float> c(size_t(n) * n);
  set_threads(2);
  gemm<float>(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  set_threads(1);
  usleep(100000);  // the 2-thread region's worker stops spinning and sleeps
  const auto before = thread_cpu_ticks();
  for (int i = 0; i < 6; ++i) gemm<float>(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  const auto after = thread_cpu_ticks();
  set_threads(2);
  const int me = int(syscall(SYS_gettid));
  long mine = 0, others = 0;
  for (const auto& [tid, t] : after) (tid == me ? mine : others) += t - (before.count(tid) ? before.at(tid) : 0);
  ASSERT_GE(mine, 10) << "the products took under 0.1 s of this thread's time: too short to tell";
  EXPECT_LT(others, mine / 4) << "other threads took " << others << " ticks while this one took " << mine;
}

using PrecisionAudit = AuditEndToEnd;

TEST_F(PrecisionAudit, Bf16ReplaysExactlyAndStaysWithinItsBoundOfFp32) {
  const std::string m = model_of(GateKind::featuregate, 150);
  const auto fp32 = audit(m, "fp32");
  nlohmann::ordered_json bf16_audit;
  {
    const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
    bf16_audit = audit(m, "bf16");
  }
  EXPECT_TRUE(fp32["exact_replay"]["passed"].get<bool>());
  EXPECT_TRUE(bf16_audit["exact_replay"]["passed"].get<bool>());
  EXPECT_EQ(fp32["provenance"]["precision"], "fp32");
  EXPECT_EQ(bf16_audit["provenance"]["precision"], "bf16");
  const SafetensorsReader cache(dir.file("bf16/cache.safetensors"));
  EXPECT_EQ(nlohmann::json::parse(cache.metadata().at("manifest"))["precision"], "bf16");
  EXPECT_EQ(bf16_audit["settings"]["precision"], "bf16");
  EXPECT_NE(fp32["baseline"]["nll"], bf16_audit["baseline"]["nll"]) << "the bf16 audit computed in fp32";
  for (const auto& c : fp32["conditions"]) {
    const std::string name = c["name"];
    const double a = c["delta_nll"], b = AuditEndToEnd::delta(bf16_audit, name);
    // bf16 keeps 8 significant bits: each product's operands move by up to 2^-9 = 2e-3 relative.
    // A penalty is a difference of mean NLLs whose rounding is mostly shared by the two passes it
    // compares, so it moves by a fraction of that relative to its size (measured: 1.2e-3 at most,
    // on identity's 2.98 nats), plus an absolute part from the rounding they do not share
    // (measured: 6e-4 nats at most, on penalties of 0.06 to 0.15). The bound, 1e-3 + 5e-3 |penalty|,
    // holds both with a margin of 2.5x or more, and stays far below the penalties the study calls
    // large (0.05 nats and up).
    EXPECT_NEAR(a, b, 1e-3 + 5e-3 * std::abs(a)) << name;
  }
}

TEST_F(PrecisionAudit, Bf16AuditsKeepTheirBatch) {
  // bf16 products depend on M (ops/onednn_matmul.h), so a model whose fp32 results do not depend
  // on the batch is treated as batch-dependent in bf16: no batch probe, and a cache written at
  // another batch is refused.
  const std::string m = model_of(GateKind::featuregate, 0);
  GatedAuditable model(m, 8, 1 << 20);
  ASSERT_TRUE(model.batch_invariant());
  EXPECT_TRUE(results_batch_invariant(model));
  const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
  EXPECT_FALSE(results_batch_invariant(model));
  (void)audit(m, "b8");
  AuditOptions o = options(m, "b4");
  o.batch = 4;
  o.cache_path = dir.file("b8/cache.safetensors");
  GatedAuditable other(m, o.batch, 1 << 20);
  try {
    run_audit(other, Corpus(dir.path()), o);
    ADD_FAILURE() << "a bf16 cache written at batch 8 was replayed at batch 4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch is 8, expected 4"), std::string::npos) << e.what();
  }
}

TEST_F(PrecisionAudit, ACacheOfTheOtherPrecisionIsRefused) {
  const std::string m = model_of(GateKind::featuregate, 0);
  (void)audit(m, "fp32");
  AuditOptions o = options(m, "bf16");
  o.cache_path = dir.file("fp32/cache.safetensors");
  const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
  GatedAuditable model(m, o.batch, 1 << 20);
  try {
    run_audit(model, Corpus(dir.path()), o);
    ADD_FAILURE() << "a cache written in fp32 was replayed in bf16";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("written with --precision fp32 and this audit runs --precision bf16"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fca
