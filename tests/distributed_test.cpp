// Distributed audits and training (docs/cluster.md): the units the work is split into, and, where
// fca is built with MPI, runs under `mpirun -np 2` and `-np 3` on this machine compared byte for
// byte with one process.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "audit/audit.h"
#include "audit/work_split.h"
#include "core/communicator.h"
#include "core/error.h"
#include "core/json.h"
#include "models/registry.h"
#include "test_util.h"

namespace fca {
namespace {

TEST(WorkSplit, OneProcessComputesAndConsumesEveryUnitInOrder) {
  std::vector<int> computed, consumed;
  const bool finished = run_units(
      single_process(), {4, 1, 7},
      [&](int u) {
        computed.push_back(u);
        return std::to_string(10 * u);
      },
      [&](int u, std::string& r) {
        consumed.push_back(u);
        EXPECT_EQ(r, std::to_string(10 * u));
        return true;
      });
  EXPECT_TRUE(finished);
  EXPECT_EQ(computed, (std::vector<int>{4, 1, 7}));
  EXPECT_EQ(consumed, (std::vector<int>{4, 1, 7}));
  // A consumer that says stop ends the run after its round.
  consumed.clear();
  EXPECT_FALSE(run_units(single_process(), {0, 1, 2}, [](int) { return std::string(); },
                         [&](int u, std::string&) {
                           consumed.push_back(u);
                           return u < 1;
                         }));
  EXPECT_EQ(consumed, (std::vector<int>{0, 1}));
  EXPECT_EQ(batch_starts(12, 5), (std::vector<int>{0, 5, 10}));
  EXPECT_EQ(decode_ints(encode_ints({3, -1, 1 << 30})), (std::vector<int>{3, -1, 1 << 30}));
  EXPECT_THROW(decode_ints("abc"), Error);
  EXPECT_EQ(single_process().size(), 1);
  EXPECT_EQ(world().size(), 1);  // the tests are not started by mpirun
}

#if FCA_WITH_MPI

class Distributed : public ::testing::Test {
 protected:
  void SetUp() override { testing::write_corpus(dir.path(), 30000, 6000, 6000); }

  // Runs fca (on `ranks` MPI ranks, 0 = one plain process) and expects success.
  std::string fca(std::vector<std::string> args, int ranks = 0) {
    args.insert(args.end(), {"--data", dir.path(), "--no-progress", "--threads", "1"});
    const testing::CommandResult r = testing::run_fca(args, ranks);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  }
  std::string train_featuregate() {
    const std::string out = dir.file("fg.safetensors");
    fca({"train", "--gate", "featuregate", "--layers", "2", "--dim", "16", "--heads", "2", "--seq", "16", "--steps", "30",
         "--batch", "8", "--lr", "0.01", "--warmup", "5", "--eval-every", "0", "--out", out});
    return out;
  }
  std::string train_mudd() {
    const std::string out = dir.file("mudd");
    fca({"train", "--arch", "mudd", "--layers", "2", "--dim", "16", "--heads", "2", "--seq", "16", "--steps", "10",
         "--batch", "4", "--eval-every", "0", "--out", out});
    return out;
  }
  std::vector<std::string> audit_args(const std::string& model, const std::string& out) {
    return {"audit", "--model", model, "--eval-windows", "24", "--calib-windows", "16", "--reps", "3", "--batch", "5",
            "--bootstrap", "300", "--seed", "3", "--out", dir.file(out)};
  }
  // audit.json without what describes the run rather than its results: provenance (time, ranks,
  // the plan), the cache's path (inside the output folder) and whether it was there already (a
  // resumed audit finds the cache of its first run).
  nlohmann::json results(const std::string& out) {
    std::ifstream in(dir.file(out + "/audit.json"));
    nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_FALSE(j.empty()) << out;
    j.erase("provenance");
    j["settings"].erase("cache");
    j["settings"].erase("cache_reused");
    return j;
  }
  nlohmann::json run_fact(const std::string& out) {
    std::ifstream in(dir.file(out + "/audit.json"));
    return nlohmann::json::parse(in)["provenance"]["run"];
  }
  int ranks_recorded(const std::string& out) { return run_fact(out)["ranks"].get<int>(); }
  testing::TempDir dir;
};

// 24 windows in batches of 5: 5 units per phase, so 2 and 3 ranks both get uneven rounds.
TEST_F(Distributed, AnAuditOnTwoOrThreeRanksIsTheSingleProcessAudit) {
  for (const std::string& model : {train_featuregate(), train_mudd()}) {
    SCOPED_TRACE(model);
    fca(audit_args(model, "one"));
    for (int ranks : {2, 3}) {
      const std::string out = "ranks" + std::to_string(ranks);
      fca(audit_args(model, out), ranks);
      EXPECT_EQ(results("one"), results(out)) << ranks << " ranks";
      EXPECT_EQ(testing::read_bytes(dir.file("one/windows.csv")), testing::read_bytes(dir.file(out + "/windows.csv")));
      EXPECT_EQ(ranks_recorded(out), ranks);
      // Exact replay compared every batch with its recording pass, kept by the rank that ran it.
      EXPECT_EQ(run_fact(out)["exact_replay_live_pass"]["rerun"], 0);
      EXPECT_EQ(run_fact(out)["exact_replay_live_pass"]["recording_pass"], 5);
      // ... and every rank checked its first recording pass against a plain live pass.
      EXPECT_EQ(run_fact(out)["exact_replay_live_pass"]["recording_pass_checked_against_plain_live"], ranks);
      EXPECT_FALSE(std::filesystem::exists(dir.file(out + "/journal.jsonl")));
      std::filesystem::remove_all(dir.file(out));
    }
    EXPECT_EQ(ranks_recorded("one"), 1);
    std::filesystem::remove_all(dir.file("one"));
  }
}

// An audit stopped in one process resumes on two ranks (and the journal's records are used, not
// recomputed), to the uninterrupted audit's results.
TEST_F(Distributed, AnAuditStoppedInOneProcessResumesOnTwoRanks) {
  const std::string model = train_featuregate();
  fca(audit_args(model, "whole"));
  {
    AuditOptions o;
    o.model_path = model;
    o.eval_windows = 24, o.calib_windows = 16, o.reps = 3, o.batch = 5, o.bootstrap_resamples = 300, o.seed = 3;
    o.out_dir = dir.file("resumed");
    o.progress = false;
    o.stop_after_batches = 2;
    auto m = open_model(model, 5, 1 << 20);
    const auto stopped = run_audit(*m, Corpus(dir.path()), o);
    ASSERT_EQ(stopped["stopped_after_batches"], 2);
  }
  const std::string log = fca(audit_args(model, "resumed"), 2);
  EXPECT_NE(log.find("resuming from"), std::string::npos) << log;
  EXPECT_EQ(results("whole"), results("resumed"));
  EXPECT_EQ(testing::read_bytes(dir.file("whole/windows.csv")), testing::read_bytes(dir.file("resumed/windows.csv")));
}

// mpirun -np N fca train --batch B is fca train --batch B --grad-accum N, checkpoint byte for byte
// (weights and optimizer state; 3 ranks make the sum's order matter), and a run stopped on ranks
// resumes in one process.
TEST_F(Distributed, DataParallelTrainingIsGradientAccumulation) {
  const std::vector<std::string> gated = {"train", "--gate", "featuregate", "--layers", "2", "--dim", "16", "--heads", "2",
                                          "--seq", "16", "--steps", "6", "--batch", "4", "--eval-every", "3"};
  const std::vector<std::string> mudd = {"train", "--arch", "mudd", "--layers", "2", "--dim", "16", "--heads", "2",
                                         "--seq", "16", "--steps", "6", "--batch", "4", "--eval-every", "3"};
  for (const auto* base : {&gated, &mudd}) {
    const bool is_mudd = base == &mudd;
    SCOPED_TRACE(is_mudd ? "mudd" : "gated");
    auto files = [&](const std::string& out) -> std::vector<std::string> {
      if (is_mudd) return {out + "/model.safetensors", out + "/train-state.safetensors"};
      return {out, out.substr(0, out.size() - 12) + ".train-state.safetensors"};
    };
    auto run = [&](const std::string& name, int ranks, std::vector<std::string> extra) {
      const std::string out = dir.file(is_mudd ? name : name + ".safetensors");
      std::vector<std::string> args = *base;
      args.insert(args.end(), extra.begin(), extra.end());
      args.insert(args.end(), {"--out", out});
      fca(args, ranks);
      return out;
    };
    for (int n : {2, 3}) {
      const std::string accumulated = run("accum" + std::to_string(n), 0, {"--grad-accum", std::to_string(n)});
      const std::string parallel = run("ranks" + std::to_string(n), n, {});
      for (size_t k = 0; k < 2; ++k) {
        ASSERT_TRUE(std::filesystem::exists(files(parallel)[k])) << files(parallel)[k];
        EXPECT_EQ(testing::read_bytes(files(accumulated)[k]), testing::read_bytes(files(parallel)[k]))
            << files(parallel)[k] << " against --grad-accum " << n;
      }
    }
    // Stopped after 2 steps on 2 ranks, resumed in one process with --grad-accum 2.
    const std::string split = run("split", 2, {"--stop-after", "2"});
    run("split", 0, {"--grad-accum", "2", "--resume"});
    for (size_t k = 0; k < 2; ++k)
      EXPECT_EQ(testing::read_bytes(files(dir.file(is_mudd ? "accum2" : "accum2.safetensors"))[k]),
                testing::read_bytes(files(split)[k]));
  }
}

// An external model under mpirun: each rank starts its own adapter, which learns its rank and local
// rank (fca_adapter.rank(), local_rank(): one model replica per GPU on a node), and the audit on two
// ranks is the one-process audit.
TEST_F(Distributed, ExternalAdaptersLearnTheirRank) {
  const std::string adapter = std::string(FCA_PYTHON) + " " + FCA_SOURCE_DIR + "/tests/external/hooked_models.py --style twice";
  auto args = [&](const std::string& out) {
    return std::vector<std::string>{"audit", "--external", adapter, "--eval-windows", "16", "--calib-windows", "8", "--reps", "2",
                                    "--bootstrap", "100", "--out", dir.file(out)};
  };
  fca(args("one"));
  const std::string output = fca(args("two"), 2);
  for (const char* line : {"adapter: rank 0 of 2, local rank 0", "adapter: rank 1 of 2, local rank 1"})
    EXPECT_NE(output.find(line), std::string::npos) << output;
  EXPECT_EQ(results("one"), results("two"));
}

TEST_F(Distributed, GradientAccumulationOnTopOfRanksIsRefused) {
  const testing::CommandResult r = testing::run_fca(
      {"train", "--gate", "featuregate", "--layers", "2", "--dim", "16", "--heads", "2", "--seq", "16", "--steps", "2",
       "--batch", "4", "--grad-accum", "2", "--data", dir.path(), "--out", dir.file("m.safetensors"), "--no-progress",
       "--threads", "1"},
      2);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--grad-accum 2 under mpirun"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("m.safetensors")));
}

#else

// Without MPI, fca refuses to be one of several ranks (each would run the whole job and write the
// same outputs).
TEST(Distributed, ABuildWithoutMpiRefusesToRunAsARank) {
  testing::TempDir dir;
  const std::string cmd = std::string("OMPI_COMM_WORLD_SIZE=2 '") + FCA_BINARY + "' info 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[512];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) output.append(buf, n);
  EXPECT_NE(pclose(pipe), 0);
  EXPECT_NE(output.find("built without MPI"), std::string::npos) << output;
}

#endif

}  // namespace
}  // namespace fca
