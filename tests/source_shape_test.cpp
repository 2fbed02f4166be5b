// The shape of the sources, each check shown to fail on a tree that breaks it:
// - every function in src/ over 80 lines (developers' guide) is listed in
//   tests/data/long_functions.txt with its reason (scripts/function_lengths.py), so the list only
//   shrinks;
// - no include runs from a lower layer into a higher one (scripts/include_graph.py; the layers of
//   docs/architecture.md, as CMakeLists.txt declares them).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <tuple>

#include "test_util.h"

namespace fca {
namespace {

std::string check_command(const std::string& root, const std::string& allowed) {
  return testing::python() + " " + testing::source("scripts/function_lengths.py") + " --check --root " + root +
         " --allowed " + allowed;
}

TEST(LongFunctions, OnlyTheListedOnes) {
  const auto [code, output] = testing::run_shell(check_command(testing::source(""), testing::source("tests/data/long_functions.txt")));
  EXPECT_EQ(code, 0) << output;
}

// A source tree with one function of `lines` lines (a signature, a body of lines - 2 statements and
// a closing brace), in src/shape/long.cpp under `root`.
void write_function(const std::string& root, int lines) {
  std::filesystem::create_directories(root + "/src/shape");
  std::ofstream f(root + "/src/shape/long.cpp");
  f << "namespace fca {\nint long_function(int x) {\n";
  for (int i = 0; i < lines - 2; ++i) f << "  x += " << i << ";  // {\n";
  f << "}\n}  // namespace fca\n";
}

TEST(LongFunctions, TheCheckFindsAnUnlistedLongFunctionAndAStaleEntry) {
  testing::TempDir dir;
  const std::string allowed = dir.file("allowed.txt");
  std::ofstream(allowed) << "# nothing listed\n";
  write_function(dir.path(), 80);
  auto [code, output] = testing::run_shell(check_command(dir.path(), allowed));
  EXPECT_EQ(code, 0) << "80 lines is within the limit: " << output;
  write_function(dir.path(), 81);
  std::tie(code, output) = testing::run_shell(check_command(dir.path(), allowed));
  EXPECT_NE(code, 0) << output;
  EXPECT_NE(output.find("src/shape/long.cpp:2: long_function has 81 lines"), std::string::npos) << output;
  std::ofstream(allowed) << "src/shape/long.cpp long_function: a test\n";
  std::tie(code, output) = testing::run_shell(check_command(dir.path(), allowed));
  EXPECT_EQ(code, 0) << output;
  write_function(dir.path(), 20);  // split: its entry is stale
  std::tie(code, output) = testing::run_shell(check_command(dir.path(), allowed));
  EXPECT_NE(code, 0) << output;
  EXPECT_NE(output.find("long_function is listed as over 80 lines but is not"), std::string::npos) << output;
}

std::string include_check(const std::string& root) {
  return testing::python() + " " + testing::source("scripts/include_graph.py") + " --check --root " + root;
}

// A source file src/<rel> of the tree at `root`, including `include` (none when empty).
void write_source(const std::string& root, const std::string& rel, const std::string& include) {
  std::filesystem::create_directories(std::filesystem::path(root + "/src/" + rel).parent_path());
  std::ofstream(root + "/src/" + rel) << "#pragma once\n" << (include.empty() ? "" : "#include \"" + include + "\"\n");
}

TEST(SourceShape, NoIncludeRunsUpTheLayers) {
  const auto [code, output] = testing::run_shell(include_check(testing::source("")));
  EXPECT_EQ(code, 0) << output;
}

// A tree of three layers and two families: downward includes pass; an upward one, and one from a
// folder in no layer, fail, each named.
TEST(SourceShape, TheIncludeCheckFindsAnArrowUp) {
  testing::TempDir dir;
  const std::string root = dir.path();
  std::ofstream(root + "/CMakeLists.txt") << "set(FCA_LAYERS core models model_families)\n";
  const auto write = [&](const std::string& rel, const std::string& include) { write_source(root, rel, include); };
  write("core/a.h", "");
  write("models/auditable.h", "core/a.h");
  write("models/base/block.h", "models/auditable.h");
  write("models/one/model.h", "models/base/block.h");
  write("models/two/model.h", "models/auditable.h");
  auto [code, output] = testing::run_shell(include_check(root));
  EXPECT_EQ(code, 0) << output;
  write("models/registry.h", "models/one/model.h");  // the models layer reaching into a family
  std::tie(code, output) = testing::run_shell(include_check(root));
  EXPECT_NE(code, 0) << output;
  EXPECT_NE(output.find("src/models/registry.h: includes models/one/model.h, which runs up from layer models to layer "
                        "model_families"),
            std::string::npos)
      << output;
  write("models/registry.h", "");
  write("tools/x.h", "core/a.h");
  std::tie(code, output) = testing::run_shell(include_check(root));
  EXPECT_NE(code, 0) << output;
  EXPECT_NE(output.find("folder tools is in no layer"), std::string::npos) << output;
}

// Inside a layer, an include that runs back up (a folder's lower piece including the header of the
// orchestration that includes it, as exec_family.h did with exec.h for ExecOptions) is a cycle of
// units, and the check names it.
TEST(SourceShape, TheIncludeCheckFindsACycleInsideALayer) {
  testing::TempDir dir;
  const std::string root = dir.path();
  std::ofstream(root + "/CMakeLists.txt") << "set(FCA_LAYERS core exec)\n";
  const auto write = [&](const std::string& rel, const std::string& include) { write_source(root, rel, include); };
  write("core/a.h", "");
  write("exec/exec_options.h", "core/a.h");
  write("exec/exec_family.h", "exec/exec_options.h");
  write("exec/exec.h", "exec/exec_options.h");
  write("exec/exec.cpp", "exec/exec_family.h");
  auto [code, output] = testing::run_shell(include_check(root));
  EXPECT_EQ(code, 0) << output;
  write("exec/exec_family.h", "exec/exec.h");  // the options taken from the orchestration's header
  std::tie(code, output) = testing::run_shell(include_check(root));
  EXPECT_NE(code, 0) << output;
  EXPECT_NE(output.find("include cycle between units: exec/exec -> exec/exec_family -> exec/exec"), std::string::npos) << output;
}

}  // namespace
}  // namespace fca
