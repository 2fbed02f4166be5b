// Row-wise kernels that run several operations in one pass over the rows (one parallel region
// instead of one per operation): each must give bitwise the values of the separate operations, in
// float and in double, whatever the thread count.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/threads.h"
#include "ops/layernorm.h"
#include "ops/norms.h"

namespace fca {
namespace {

template <typename T>
std::vector<T> random_values(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g(0.0, scale);
  std::vector<T> v(n);
  for (auto& x : v) x = T(g(rng));
  return v;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(T) * a.size()) == 0;
}

template <typename T>
void expect_layernorm_group_is_separate_calls(int threads) {
  set_threads(threads);
  const int64_t N = 37;
  const int C = 72;
  // Two inputs, one of them with a large mean (the two-pass variance).
  auto x1 = random_values<T>(size_t(N) * C, 1), x2 = random_values<T>(size_t(N) * C, 2, 3.0);
  for (auto& v : x2) v += T(40);
  const auto w1 = random_values<T>(size_t(C), 3), b1 = random_values<T>(size_t(C), 4);
  const auto w2 = random_values<T>(size_t(C), 5), b2 = random_values<T>(size_t(C), 6);
  std::vector<T> want1(x1.size()), m1(N), r1(N), want2(x2.size()), m2(N), r2(N);
  layernorm_forward(want1.data(), m1.data(), r1.data(), x1.data(), w1.data(), b1.data(), N, C);
  layernorm_forward(want2.data(), m2.data(), r2.data(), x2.data(), w2.data(), b2.data(), N, C);
  std::vector<T> got1(x1.size()), gm1(N), gr1(N), got2(x2.size()), gm2(N), gr2(N);
  layernorm_forward_group<T>({{got1.data(), gm1.data(), gr1.data(), x1.data(), w1.data(), b1.data()},
                              {got2.data(), gm2.data(), gr2.data(), x2.data(), w2.data(), b2.data()}},
                             N, C);
  EXPECT_TRUE(same_bits(got1, want1) && same_bits(gm1, m1) && same_bits(gr1, r1));
  EXPECT_TRUE(same_bits(got2, want2) && same_bits(gm2, m2) && same_bits(gr2, r2));
}

TEST(FusedRows, LayerNormGroupIsTheSeparateLayerNorms) {
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    expect_layernorm_group_is_separate_calls<float>(threads);
    expect_layernorm_group_is_separate_calls<double>(threads);
  }
}

template <typename T>
void expect_rmsnorm_rope_is_separate_calls(int threads) {
  set_threads(threads);
  // MUDD's layout: q in the first D columns of a packed [N, 3D] buffer, H heads of dh, partial
  // rotary on the first `rot` dims of each head.
  const int B = 3, Tn = 11, H = 4, dh = 24, rot = 8, D = H * dh;
  const int64_t N = int64_t(B) * Tn, stride = 3 * D;
  const auto packed = random_values<T>(size_t(N) * stride, 7, 2.0);
  const auto scale = random_values<T>(size_t(dh), 8);
  std::vector<T> cos_table(size_t(Tn) * rot / 2), sin_table(cos_table.size());
  rope_tables(cos_table.data(), sin_table.data(), Tn, rot, 10000.0);
  std::vector<T> want = packed, want_rstd(size_t(N) * H);
  rmsnorm_forward(want.data(), want_rstd.data(), want.data(), scale.data(), N, H, dh, stride, 1e-6);
  // The rotation, written out: the NeoX pairing of dim m with m + rot/2 at position n % Tn.
  for (int64_t n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h) {
      T* v = want.data() + n * stride + int64_t(h) * dh;
      const T* c = cos_table.data() + (n % Tn) * (rot / 2);
      const T* s = sin_table.data() + (n % Tn) * (rot / 2);
      for (int m = 0; m < rot / 2; ++m) {
        const T a = v[m], b = v[m + rot / 2], sn = s[m];
        v[m] = a * c[m] - b * sn;
        v[m + rot / 2] = b * c[m] + a * sn;
      }
    }
  std::vector<T> got = packed, got_rstd(size_t(N) * H);
  rmsnorm_rope_forward(got.data(), got_rstd.data(), scale.data(), cos_table.data(), sin_table.data(), B, Tn, H, dh, rot,
                       stride, 1e-6);
  EXPECT_TRUE(same_bits(got, want));  // also: the columns after q untouched
  EXPECT_TRUE(same_bits(got_rstd, want_rstd));
}

TEST(FusedRows, RmsNormThenRotaryIsTheSeparateOperations) {
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    expect_rmsnorm_rope_is_separate_calls<float>(threads);
    expect_rmsnorm_rope_is_separate_calls<double>(threads);
  }
}

}  // namespace
}  // namespace fca
