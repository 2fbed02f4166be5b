// The fixture of the audit's end-to-end tests (audit_test.cpp, audit_refusal_test.cpp): a corpus
// in a temporary folder, small gated models trained or initialised on it, and the small audit every
// test runs.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "audit/aggregate.h"
#include "audit/cache.h"
#include "audit/audit.h"
#include "report/audit_markdown.h"
#include "audit/conditions.h"
#include "core/rng.h"
#include "core/undefined_statistic.h"
#include "core/safetensors.h"
#include "core/threads.h"
#include "models/gated/auditable.h"
#include "models/mudd/auditable.h"
#include "report/report.h"
#include "test_util.h"
#include "train/trainer.h"

namespace fca {

class AuditEndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    set_threads(2);
    testing::write_corpus(dir.path(), 30000, 6000, 6000);
  }
  // Trains (or just initialises, steps = 0) a small model of the given gate kind.
  std::string model_of(GateKind kind, int steps, uint64_t seed = 1) {
    const std::string path = dir.file(std::string(gate_kind_name(kind)) + std::to_string(seed) + ".safetensors");
    if (steps == 0) {
      GatedModel<float>::initialized(testing::tiny_config(kind), seed).save(path);
      return path;
    }
    TrainOptions o;
    testing::train_gated(o, testing::tiny_config(kind));
    o.batch = 8;
    o.steps = steps;
    o.lr = 1e-2;
    o.warmup = 5;
    o.eval_every = 0;
    o.seed = seed;
    o.out = path;
    o.progress = false;
    train_model(o, Corpus(dir.path()));
    return path;
  }
  // The small audit every test here runs: 24 + 16 windows, 3 randomisations, batch 8.
  AuditOptions options(const std::string& model_path, const std::string& out, uint64_t seed = 3) {
    AuditOptions o;
    o.model_path = model_path;
    o.eval_windows = 24;
    o.calib_windows = 16;
    o.reps = 3;
    o.batch = 8;
    o.bootstrap_resamples = 500;
    o.seed = seed;
    o.out_dir = dir.file(out);
    o.progress = false;
    return o;
  }
  nlohmann::ordered_json audit(const std::string& model_path, const std::string& out, uint64_t seed = 3) {
    const AuditOptions o = options(model_path, out, seed);
    GatedAuditable model(model_path, o.batch, 1 << 20);
    return run_audit(model, Corpus(dir.path()), o);
  }
  static double delta(const nlohmann::ordered_json& j, const std::string& name) {
    for (const auto& c : j["conditions"])
      if (c["name"] == name) return c["delta_nll"];
    ADD_FAILURE() << "no condition " << name;
    return 0;
  }
  testing::TempDir dir;
};


}  // namespace fca
