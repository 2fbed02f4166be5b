// Training: bit-identical checkpoints for the same seed, data and thread count; a run stopped and
// resumed ends bit-identical to an uninterrupted one; the loss goes down.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/threads.h"
#include "models/gated/model.h"
#include "test_util.h"
#include "train/adamw.h"
#include "train/trainer.h"

namespace fca {
namespace {

TrainOptions tiny_options(const std::string& out) {
  TrainOptions o;
  testing::train_gated(o, testing::tiny_config(GateKind::featuregate));
  o.batch = 4;
  o.grad_accum = 2;
  o.steps = 8;
  o.warmup = 2;
  o.lr = 3e-3;
  o.seed = 42;
  o.eval_every = 4;
  o.eval_windows = 4;
  o.out = out;
  o.progress = false;
  return o;
}

TEST(Training, SameSeedSameBits) {
  set_threads(2);
  testing::TempDir dir;
  testing::write_corpus(dir.path(), 20000, 2000, 2000);
  Corpus corpus(dir.path());
  train_model(tiny_options(dir.file("a.safetensors")), corpus);
  train_model(tiny_options(dir.file("b.safetensors")), corpus);
  EXPECT_EQ(testing::read_bytes(dir.file("a.safetensors")), testing::read_bytes(dir.file("b.safetensors")));
  EXPECT_EQ(testing::read_bytes(dir.file("a.train-state.safetensors")),
            testing::read_bytes(dir.file("b.train-state.safetensors")));
}

// Every kernel splits work so that no value depends on the split (GEMM rows, per-(window, head)
// attention, column-parallel reductions, fixed-chunk norms), so 1 and 3 threads train the same
// weights bit for bit (the files differ only in the provenance that records the thread count).
TEST(Training, TheThreadCountDoesNotChangeTheBits) {
  testing::TempDir dir;
  testing::write_corpus(dir.path(), 20000, 2000, 2000);
  Corpus corpus(dir.path());
  set_threads(1);
  train_model(tiny_options(dir.file("one.safetensors")), corpus);
  set_threads(3);
  train_model(tiny_options(dir.file("three.safetensors")), corpus);
  set_threads(2);
  const auto one = GatedModel<float>::load(dir.file("one.safetensors"));
  const auto three = GatedModel<float>::load(dir.file("three.safetensors"));
  ASSERT_EQ(one.buffer_size(), three.buffer_size());
  EXPECT_EQ(0, std::memcmp(one.data(), three.data(), sizeof(float) * one.buffer_size()));
}

// The gradient norm that clipping divides by: within 1e-12 relative of a long-double sum (the
// float squares are exact in double and 2^23 of them lose at most ~23 bits of 53), and the same
// bits on 1 and 3 threads (fixed chunks and lanes), on a length that is no multiple of either.
TEST(Training, GlobalNormIsTheNormWhateverTheThreadCount) {
  const size_t n = 3 * 65536 + 12345;
  const std::vector<float> g = testing::uniform_values(n, 7);
  long double exact = 0;
  for (float x : g) exact += (long double)x * x;
  set_threads(1);
  const double one = global_norm(g.data(), n);
  set_threads(3);
  const double three = global_norm(g.data(), n);
  set_threads(2);
  EXPECT_NEAR(one, double(std::sqrt(exact)), 1e-12 * double(std::sqrt(exact)));
  EXPECT_EQ(0, std::memcmp(&one, &three, sizeof one));
}

TEST(Training, ResumeEqualsUninterrupted) {
  set_threads(2);
  testing::TempDir dir;
  testing::write_corpus(dir.path(), 20000, 2000, 2000);
  Corpus corpus(dir.path());
  train_model(tiny_options(dir.file("full.safetensors")), corpus);
  TrainOptions first = tiny_options(dir.file("resumed.safetensors"));
  first.stop_after = 3;
  EXPECT_EQ(train_model(first, corpus).steps_done, 3);
  TrainOptions rest = tiny_options(dir.file("resumed.safetensors"));
  rest.resume = true;
  EXPECT_EQ(train_model(rest, corpus).steps_done, 8);
  EXPECT_EQ(testing::read_bytes(dir.file("full.safetensors")), testing::read_bytes(dir.file("resumed.safetensors")));
  EXPECT_EQ(testing::read_bytes(dir.file("full.train-state.safetensors")),
            testing::read_bytes(dir.file("resumed.train-state.safetensors")));
}

TEST(Training, ResumeWithOtherSettingsIsRefused) {
  set_threads(2);
  testing::TempDir dir;
  testing::write_corpus(dir.path(), 20000, 2000, 2000);
  Corpus corpus(dir.path());
  TrainOptions o = tiny_options(dir.file("m.safetensors"));
  o.stop_after = 2;
  train_model(o, corpus);
  TrainOptions changed = tiny_options(dir.file("m.safetensors"));
  changed.resume = true;
  changed.lr = 1e-2;
  EXPECT_THROW(train_model(changed, corpus), Error);
}

TEST(Training, LossDecreases) {
  set_threads(2);
  testing::TempDir dir;
  testing::write_corpus(dir.path(), 20000, 2000, 2000);
  Corpus corpus(dir.path());
  for (GateKind kind : {GateKind::dense, GateKind::fixed, GateKind::uniform, GateKind::layerstatic, GateKind::featuregate}) {
    TrainOptions o = tiny_options(dir.file(std::string(gate_kind_name(kind)) + ".safetensors"));
    o.settings["gate"] = gate_kind_name(kind);
    o.steps = 40;
    o.lr = 1e-2;
    o.eval_every = 0;
    const TrainResult r = train_model(o, corpus);
    // Initial loss is ln 256 = 5.55; the pseudo-English text has ~19 words: much lower quickly.
    EXPECT_LT(r.final_loss, 3.5) << gate_kind_name(kind);
    EXPECT_LT(r.final_valid_nll, 3.5) << gate_kind_name(kind);
  }
}

}  // namespace
}  // namespace fca
