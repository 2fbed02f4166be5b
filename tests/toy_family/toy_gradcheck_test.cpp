// The toy family's backward pass against central finite differences of its training objective in
// double, for every tensor (test_util.h's check: step 1e-5, tolerance 1e-7 + 1e-5 |g|): the toy
// trains in the conformance suite, so its gradients are checked as every family's are.
#include <gtest/gtest.h>

#include <vector>

#include "core/rng.h"
#include "test_util.h"
#include "toy_family/toy_model.h"

namespace fca::toy {
namespace {

TEST(ToyFamily, BackwardMatchesFiniteDifferences) {
  const ToyConfig c{2, 6, 1, 5};
  ToyModel<double> model = ToyModel<double>::initialized(c, 3);
  // Off the initial values (biases off 0, weights larger) so that no term vanishes by symmetry.
  Rng rng(4);
  for (size_t i = 0; i < model.buffer_size(); ++i) model.data()[i] += 0.3 * rng.normal();
  const int B = 2, T = c.seq_len;
  std::vector<int32_t> x(size_t(B) * T), y(size_t(B) * T);
  for (auto& v : x) v = int32_t(rng.below(kVocab));
  for (auto& v : y) v = int32_t(rng.below(kVocab));
  ToyRunState<double> rs(c, B, T, true);
  auto loss_at = [&]() {
    ToyLiveGates<double> live(model);
    toy_forward(model, rs, x.data(), B, T, live);
    return toy_loss(rs, y.data(), nullptr);  // the mean over the B T tokens
  };
  loss_at();
  ToyModel<double> grads(c);
  toy_backward(model, rs, grads, 1.0 / (B * T));
  testing::expect_gradients_match_finite_differences(
      model.layout(), [&](const TensorSlot& s) { return model.data() + s.offset; },
      [&](const TensorSlot& s) { return static_cast<const double*>(grads.data() + s.offset); }, loss_at, 5);
}

}  // namespace
}  // namespace fca::toy
