// scripts/prepare_corpus: WikiText-103's raw files and OpenWebText's documents become fca data
// folders (train/valid/test.txt, SHA256SUMS, corpus.json) that fca trains on; bad input is named.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "test_util.h"

namespace fca {
namespace {

using testing::read_bytes;
using testing::run_shell;
using testing::source;
using testing::write_text;

std::string prepare(const std::string& args) {
  return "/usr/bin/python3 " + source("scripts/prepare_corpus") + " " + args + " 2>&1";
}

TEST(PrepareCorpus, WikiTextIsCopiedByteForByte) {
  testing::TempDir dir;
  std::filesystem::create_directory(dir.file("wt"));
  std::filesystem::create_directory(dir.file("plain"));
  testing::write_corpus(dir.file("plain"), 20000, 3000, 3000);
  for (const char* split : {"train", "valid", "test"})
    write_text(dir.file("wt/wiki." + std::string(split) + ".raw"), " = Heading = \n" + read_bytes(dir.file("plain/" + std::string(split) + ".txt")));
  auto [status, output] = run_shell(prepare("wikitext103 --source " + dir.file("wt") + " --out " + dir.file("out")));
  ASSERT_EQ(status, 0) << output;
  for (const char* split : {"train", "valid", "test"})
    EXPECT_EQ(read_bytes(dir.file("out/" + std::string(split) + ".txt")), read_bytes(dir.file("wt/wiki." + std::string(split) + ".raw")));
  std::tie(status, output) = run_shell("cd " + dir.file("out") + " && sha256sum -c SHA256SUMS 2>&1");
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(read_bytes(dir.file("out/corpus.json")).find("\"corpus\": \"WikiText-103 (raw)\""), std::string::npos);
  // fca reads the folder.
  const auto r = testing::run_fca({"train", "--layers", "1", "--dim", "16", "--heads", "2", "--seq", "16", "--steps", "2",
                                   "--no-progress", "--data", dir.file("out"), "--out", dir.file("m.safetensors")});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // An existing folder is kept unless --force; a missing file is named.
  std::tie(status, output) = run_shell(prepare("wikitext103 --source " + dir.file("wt") + " --out " + dir.file("out")));
  EXPECT_NE(status, 0);
  EXPECT_NE(output.find("exists (give --force to replace it)"), std::string::npos) << output;
  std::filesystem::remove(dir.file("wt/wiki.test.raw"));
  std::tie(status, output) = run_shell(prepare("wikitext103 --source " + dir.file("wt") + " --out " + dir.file("out2")));
  EXPECT_NE(status, 0);
  EXPECT_NE(output.find("wiki.test.raw is missing"), std::string::npos) << output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out2")));
}

TEST(PrepareCorpus, OpenWebTextHoldsOutEveryKthDocument) {
  testing::TempDir dir;
  // Ten documents in two shard folders; path order is a/0 .. a/4, b/5 .. b/9.
  std::filesystem::create_directories(dir.file("owt/a"));
  std::filesystem::create_directories(dir.file("owt/b"));
  for (int n = 0; n < 10; ++n)
    write_text(dir.file(std::string(n < 5 ? "owt/a/" : "owt/b/") + "doc" + std::to_string(n) + ".txt"),
               "document " + std::to_string(n) + (n % 2 ? "\n" : ""));
  auto [status, output] = run_shell(prepare("openwebtext --holdout-every 5 --source " + dir.file("owt") + " --out " + dir.file("out")));
  ASSERT_EQ(status, 0) << output;
  EXPECT_EQ(read_bytes(dir.file("out/valid.txt")), "document 3\n\ndocument 8\n");
  EXPECT_EQ(read_bytes(dir.file("out/test.txt")), "document 4\n\ndocument 9\n");
  EXPECT_EQ(read_bytes(dir.file("out/train.txt")),
            "document 0\n\ndocument 1\n\ndocument 2\n\ndocument 5\n\ndocument 6\n\ndocument 7\n");
  std::tie(status, output) = run_shell("cd " + dir.file("out") + " && sha256sum -c SHA256SUMS 2>&1");
  EXPECT_EQ(status, 0) << output;
  std::tie(status, output) = run_shell(prepare("openwebtext --holdout-every 50 --source " + dir.file("owt") + " --out " + dir.file("few")));
  EXPECT_NE(status, 0);
  EXPECT_NE(output.find("leave the valid split empty"), std::string::npos) << output;
}

}  // namespace
}  // namespace fca
