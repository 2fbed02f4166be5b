// docs/adding-a-family.md lists the files outside src/models/ that name a model family (none since
// the family table, issue 25); this keeps the list true in both directions, so that no switch on a
// family's name slips in unlisted.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace fca {
namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(AddingAFamily, TheListOfPlacesIsTrue) {
  const std::filesystem::path root(FCA_SOURCE_DIR);
  const std::string doc = read_text(root / "docs/adding-a-family.md");
  const std::string begin = "<!-- family-dispatch-list: begin -->", end = "<!-- family-dispatch-list: end -->";
  ASSERT_NE(doc.find(begin), std::string::npos);
  ASSERT_NE(doc.find(end), std::string::npos);
  const std::string list = doc.substr(doc.find(begin), doc.find(end) - doc.find(begin));
  std::set<std::string> listed;
  const std::regex item("- `(src/[^`]+)`");
  for (std::sregex_iterator it(list.begin(), list.end(), item), stop; it != stop; ++it) listed.insert((*it)[1]);

  const std::regex family_name("\"(gated|mudd|moe|mod)\"");
  std::set<std::string> naming;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root / "src")) {
    const std::string rel = std::filesystem::relative(entry.path(), root).generic_string();
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".h") || rel.rfind("src/models/", 0) == 0) continue;
    const std::string text = read_text(entry.path());
    if (std::regex_search(text, family_name)) naming.insert(rel);
  }
  for (const auto& f : naming)
    EXPECT_TRUE(listed.count(f)) << f << " names a model family but is not listed in docs/adding-a-family.md";
  for (const auto& f : listed)
    EXPECT_TRUE(naming.count(f)) << f << " is listed in docs/adding-a-family.md but names no family any more: delete its line";
}

// No family's folder includes another family's: what they share is in src/models/base/ (and the
// model-agnostic files of src/models/ itself).
TEST(AddingAFamily, NoFamilyIncludesAnother) {
  const std::filesystem::path models = std::filesystem::path(FCA_SOURCE_DIR) / "src/models";
  const std::regex include("#include \"models/([^/\"]+)/");
  int families = 0;
  for (const auto& folder : std::filesystem::directory_iterator(models)) {
    if (!folder.is_directory() || folder.path().filename() == "base") continue;
    ++families;
    const std::string own = folder.path().filename().string();
    for (const auto& entry : std::filesystem::recursive_directory_iterator(folder.path())) {
      if (!entry.is_regular_file()) continue;
      const std::string text = read_text(entry.path());
      for (std::sregex_iterator it(text.begin(), text.end(), include), stop; it != stop; ++it) {
        const std::string other = (*it)[1];
        EXPECT_TRUE(other == own || other == "base") << entry.path() << " includes models/" << other << "/";
      }
    }
  }
  EXPECT_GE(families, 4);
}

}  // namespace
}  // namespace fca
