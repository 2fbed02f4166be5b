// The MoE and MoD backward passes against central finite differences of the training objective in
// double, for every parameter (router, experts, routed and unrouted blocks). Routing is discrete:
// the check holds the model away from ties and asserts that no perturbation changes which experts
// or tokens are selected (a change would make the finite difference meaningless, not the gradient
// wrong).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "models/mod/forward.h"
#include "models/moe/forward.h"

namespace fca {
namespace {

template <typename Model>
void perturb(Model& m, uint64_t seed) {
  Rng rng(seed);
  // Off the initial values (LayerNorm weights off 1, biases off 0) so that no term vanishes by symmetry.
  for (size_t i = 0; i < m.buffer_size(); ++i) m.data()[i] += 0.3 * rng.normal();
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};
Batch random_batch(int N) {
  Batch b;
  Rng rng(3);
  for (int i = 0; i < N; ++i) {
    b.tokens.push_back(int32_t(rng.below(256)));
    b.targets.push_back(int32_t(rng.below(256)));
  }
  return b;
}

// Step 1e-5 and tolerance 1e-7 + 1e-5 |g|: as the gated family's check (truncation ~1e-10,
// rounding ~1e-11), two orders of margin; a wrong term is O(|g|).
constexpr double kStep = 1e-5;
void expect_gradient(double analytic, double numeric, const std::string& what) {
  ASSERT_LE(std::abs(numeric - analytic), 1e-7 + 1e-5 * std::abs(numeric)) << what << ": analytic " << analytic << " numeric " << numeric;
}

// Every parameter's analytic gradient against the central difference of loss_at(model).
template <typename Model, typename Loss>
void expect_all_gradients(Model& model, const Model& grads, Loss loss_at) {
  for (const auto& slot : model.layout())
    for (size_t i = 0; i < slot.numel; ++i) {
      double& p = model.data()[slot.offset + i];
      const double saved = p;
      p = saved + kStep;
      const double up = loss_at(model);
      p = saved - kStep;
      const double down = loss_at(model);
      p = saved;
      expect_gradient(grads.data()[slot.offset + i], (up - down) / (2 * kStep), slot.name + "[" + std::to_string(i) + "]");
    }
}

void check_moe(int k) {
  MoeConfig c;
  c.n_layer = 2;
  c.d_model = 8;
  c.n_head = 2;
  c.seq_len = 6;
  c.n_expert = 4;
  c.top_k = k;
  c.expert_hidden = 6;
  c.aux_loss = 0.5;  // large, so that the auxiliary term's gradient is well above the tolerance
  const int B = 2, Tn = 5, N = B * Tn;
  MoeModel<double> model = MoeModel<double>::initialized(c, 11);
  perturb(model, 12);
  const Batch batch = random_batch(N);
  MoeRunState<double> rs(c, B, Tn, true);
  MoeLiveRouting<double> live(model);
  moe_forward(model, rs, batch.tokens.data(), B, Tn, live);
  moe_loss(rs, batch.targets.data(), nullptr);
  std::vector<int32_t> routing;
  for (const auto& s : rs.layers) routing.insert(routing.end(), s.experts, s.experts + N * k);
  MoeModel<double> grads(c);
  moe_backward(model, rs, grads, 1.0 / N);

  MoeRunState<double> probe(c, B, Tn, false);
  auto objective_at = [&](MoeModel<double>& m) {
    MoeLiveRouting<double> source(m);
    moe_forward(m, probe, batch.tokens.data(), B, Tn, source);
    const double ce = moe_loss(probe, batch.targets.data(), nullptr);
    std::vector<int32_t> now;
    for (const auto& s : probe.layers) now.insert(now.end(), s.experts, s.experts + N * k);
    EXPECT_EQ(now, routing) << "a perturbation of " << kStep << " changed the routing: the check sits on a tie";
    return moe_objective(probe, ce);
  };
  expect_all_gradients(model, grads, objective_at);
}

TEST(RoutedGradCheck, MoeTop2) { check_moe(2); }
TEST(RoutedGradCheck, MoeTop1) { check_moe(1); }

TEST(RoutedGradCheck, MixtureOfDepths) {
  ModConfig c;
  c.n_layer = 3;  // blocks 0 and 2 dense, block 1 routed
  c.d_model = 8;
  c.n_head = 2;
  c.seq_len = 6;
  c.capacity = 0.5;
  const int B = 2, Tn = 6, N = B * Tn;
  ModModel<double> model = ModModel<double>::initialized(c, 21);
  perturb(model, 22);
  const Batch batch = random_batch(N);
  ModRunState<double> rs(c, B, Tn, true);
  ModLiveRouting<double> live(model);
  mod_forward(model, rs, batch.tokens.data(), B, Tn, live);
  mod_loss(rs, batch.targets.data(), nullptr);
  const int K = c.selected_tokens(Tn);
  const std::vector<int32_t> selection(rs.routed[1].rows, rs.routed[1].rows + B * K);
  ModModel<double> grads(c);
  mod_backward(model, rs, grads, 1.0 / N);
  ModRunState<double> probe(c, B, Tn, false);
  auto loss_at = [&](ModModel<double>& m) {
    ModLiveRouting<double> source(m);
    mod_forward(m, probe, batch.tokens.data(), B, Tn, source);
    EXPECT_EQ(std::vector<int32_t>(probe.routed[1].rows, probe.routed[1].rows + B * K), selection)
        << "a perturbation changed the selection: the check sits on a tie";
    return mod_loss(probe, batch.targets.data(), nullptr);
  };
  expect_all_gradients(model, grads, loss_at);
}

}  // namespace
}  // namespace fca
