// The GPT-NeoX-20B tokenizer: every case of tests/data/gpt-neox-tokenizer/cases.json (checked
// there against Hugging Face tokenizers), NFC, BPE order on a tiny tokenizer.json in both merge
// forms, and the errors for bad files and bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include "core/json.h"

#include "core/error.h"
#include "models/mudd/tokenizer.h"
#include "models/mudd/unicode_tables.h"
#include "test_util.h"

namespace fca {
namespace {

using nlohmann::json;

std::string testdata(const std::string& name) {
  std::string path = FCA_SOURCE_DIR;
  path += "/tests/data/gpt-neox-tokenizer/";
  path += name;
  return path;
}

// Loaded once: the file is 2 MB. A missing file makes load throw an Error naming it, which fails
// every test that uses it: the data is part of the repository, so nothing is skipped.
const BpeTokenizer& neox() {
  static const BpeTokenizer tokenizer = BpeTokenizer::load(testdata("tokenizer.json"));
  return tokenizer;
}

TEST(TokenizerData, FilesArePresent) {
  for (const char* name : {"tokenizer.json", "cases.json"})
    ASSERT_TRUE(std::filesystem::exists(testdata(name)))
        << "test data missing: " << testdata(name) << " (tests/data/ is part of the repository)";
}

TEST(TokenizerNeox, AllCasesMatchHuggingFace) {
  std::ifstream in(testdata("cases.json"));
  ASSERT_TRUE(in) << "cannot open " << testdata("cases.json");
  const json cases = json::parse(in);
  ASSERT_EQ(cases.size(), 47u);
  int matched = 0;
  for (const auto& c : cases) {
    const std::vector<int32_t> expected = c.at("ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> ids = neox().encode(c.at("text").get<std::string>());
    EXPECT_EQ(ids, expected) << "case '" << c.at("name").get<std::string>() << "'";
    matched += ids == expected;
  }
  EXPECT_EQ(matched, 47);
}

TEST(TokenizerNeox, ReadmeExamples) {
  EXPECT_EQ(neox().encode("The quick brown fox."), (std::vector<int32_t>{510, 3158, 8516, 30013, 15}));
  EXPECT_EQ(neox().encode("héllo wörld 東京 🙂"),
            (std::vector<int32_t>{73, 860, 48620, 259, 6592, 392, 209, 12676, 111, 5494, 107, 42908}));
  EXPECT_EQ(neox().vocab_size(), 50277);
}

TEST(TokenizerNeox, DecodeInvertsEncode) {
  std::ifstream in(testdata("cases.json"));
  ASSERT_TRUE(in);
  for (const auto& c : json::parse(in)) {
    const std::string text = c.at("text").get<std::string>();
    if (c.at("name") == "accents (decomposed, NFC applies)") continue;  // comes back composed
    EXPECT_EQ(neox().decode(neox().encode(text)), text) << "case '" << c.at("name").get<std::string>() << "'";
  }
  EXPECT_EQ(neox().decode({0, 50276, 12092}), "<|endoftext|>  Hello");
  EXPECT_THROW(neox().decode({50277}), Error);
  EXPECT_THROW(neox().decode({-1}), Error);
}

TEST(TokenizerNeox, DecomposedTextEncodesAsComposed) {
  EXPECT_EQ(neox().encode("cafe\xCC\x81 nai\xCC\x88ve"), neox().encode("caf\xC3\xA9 na\xC3\xAFve"));
  // Hangul jamo L V T compose to the syllable 각 (U+AC01).
  EXPECT_EQ(neox().encode("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), neox().encode("\xEA\xB0\x81"));
}

TEST(TokenizerNeox, InvalidUtf8NamesTheOffset) {
  auto message = [](const std::string& text) {
    try {
      neox().encode(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("ab\xFF" "cd").find("byte offset 2"), std::string::npos) << message("ab\xFF" "cd");
  EXPECT_NE(message("<|endoftext|>x\xC3").find("byte offset 14"), std::string::npos);  // truncated at the end
  EXPECT_NE(message("\xED\xA0\x80").find("byte offset 0"), std::string::npos);           // a surrogate
  EXPECT_NE(message("\xC0\xAF").find("byte offset 0"), std::string::npos);               // overlong '/'
}

TEST(TokenizerNfc, ComposesReordersAndExcludes) {
  EXPECT_EQ(nfc(U"e\u0301"), U"\u00E9");
  EXPECT_EQ(nfc(U"\u1100\u1161\u11A8"), U"\uAC01");      // Hangul L V T
  EXPECT_EQ(nfc(U"\uAC00\u11A8"), U"\uAC01");            // Hangul LV + T
  EXPECT_EQ(nfc(U"d\u0307\u0323"), U"\u1E0D\u0307");     // dot below (220) sorts before dot above (230)
  EXPECT_EQ(nfc(U"A\u030A\u0323"), U"\u1EA0\u030A");
  EXPECT_EQ(nfc(U"a\u0301\u0301"), U"\u00E1\u0301");     // the second acute is blocked by the first
  EXPECT_EQ(nfc(U"\u0958"), U"\u0915\u093C");            // a composition exclusion stays decomposed
  EXPECT_EQ(nfc(U"\u212B"), U"\u00C5");                  // a singleton (ANGSTROM SIGN)
  EXPECT_EQ(nfc(U"x\u0323\u0302e\u0302"), U"x\u0323\u0302\u00EA");
  EXPECT_EQ(nfc(U"plain ASCII"), U"plain ASCII");
}

TEST(TokenizerNfc, CharacterClasses) {
  EXPECT_TRUE(unicode::is_letter(U'\u00E9'));
  EXPECT_TRUE(unicode::is_letter(U'\u6771'));
  EXPECT_FALSE(unicode::is_letter(U'\u0301'));  // a mark, not a letter
  EXPECT_TRUE(unicode::is_number(U'\u00B2'));
  EXPECT_TRUE(unicode::is_number(U'\u2153'));
  EXPECT_TRUE(unicode::is_whitespace(U'\u00A0'));
  EXPECT_TRUE(unicode::is_whitespace(U'\u3000'));
  EXPECT_FALSE(unicode::is_whitespace(U'\u001C'));  // Python's isspace() says yes; White_Space says no
  EXPECT_FALSE(unicode::is_whitespace(U'\u200B'));
}

// A tiny byte-level tokenizer: the 256 byte characters as ids 0..255 in byte order, then the
// merges' results, and one added token <x> (id 261).
json tiny_tokenizer(bool pair_merges) {
  json vocab = json::object();
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const char32_t c = printable ? static_cast<char32_t>(b) : next++;
    std::string utf8;
    if (c < 0x80) {
      utf8 += static_cast<char>(c);
    } else {
      utf8 += static_cast<char>(0xC0 | (c >> 6));
      utf8 += static_cast<char>(0x80 | (c & 0x3F));
    }
    vocab[utf8] = b;
  }
  const std::vector<std::pair<std::string, std::string>> merges{{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"a", "a"}, {"Ġ", "a"}};
  json merge_list = json::array();
  int id = 256;
  for (const auto& [left, right] : merges) {
    vocab[left + right] = id++;
    merge_list.push_back(pair_merges ? json::array({left, right}) : json(left + " " + right));
  }
  json added = json::array();
  added.push_back({{"id", 261}, {"content", "<x>"}, {"special", true}, {"normalized", false}});
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", {{"type", "NFC"}}},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}}},
          {"post_processor", {{"type", "ByteLevel"}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"vocab", vocab}, {"merges", merge_list}}}};
}

std::string write_json(const testing::TempDir& dir, const std::string& name, const json& j, bool ascii = false) {
  testing::write_text(dir.file(name), j.dump(2, ' ', ascii));
  return dir.file(name);
}

TEST(TokenizerBpe, MergeOrderInBothMergeForms) {
  testing::TempDir dir;
  const auto strings = BpeTokenizer::load(write_json(dir, "strings.json", tiny_tokenizer(false)));
  const auto pairs = BpeTokenizer::load(write_json(dir, "pairs.json", tiny_tokenizer(true)));
  const auto escaped = BpeTokenizer::load(write_json(dir, "escaped.json", tiny_tokenizer(false), true));  // \uXXXX
  const std::vector<std::pair<std::string, std::vector<int32_t>>> expected{
      {"abc", {258}},         // b+c (rank 0) before a+b (rank 1), then a+bc
      {"aaa", {259, 'a'}},    // equal ranks: the leftmost pair first
      {" aab", {260, 257}},   // a+b (rank 1) first, then Ġ+a (rank 4); a+a lost its right half
      {"x<x>y", {'x', 261, 'y'}},
      {"ab ab", {257, ' ', 257}},    // Ġ is byte 0x20, id 32: a+b (rank 1) beats Ġ+a (rank 4)
  };
  for (const auto& [text, ids] : expected) {
    EXPECT_EQ(strings.encode(text), ids) << text;
    EXPECT_EQ(pairs.encode(text), ids) << text;
    EXPECT_EQ(escaped.encode(text), ids) << text;
  }
  EXPECT_EQ(pairs.vocab_size(), 262);
  EXPECT_EQ(pairs.decode({260, 257, 261}), " aab<x>");
}

// The message of the Error that loading `path` throws, or "no error".
std::string load_error(const std::string& path) {
  try {
    BpeTokenizer::load(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(TokenizerErrors, BadFilesNameFileAndField) {
  testing::TempDir dir;
  auto expect_error = [&](const std::string& name, const json& j, const std::string& needle) {
    const std::string path = write_json(dir, name, j);
    const std::string message = load_error(path);
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(needle), std::string::npos) << message;
  };
  json j = tiny_tokenizer(false);
  j["model"].erase("vocab");
  expect_error("no_vocab.json", j, "model.vocab: missing");

  j = tiny_tokenizer(true);
  j["model"]["merges"].push_back(json::array({"a", "zz"}));
  expect_error("unknown_merge.json", j, "model.merges[5]: token \"zz\" is not in model.vocab");

  j = tiny_tokenizer(false);
  j["model"]["merges"].push_back("abc");
  expect_error("bad_merge.json", j, "model.merges[5]: expected \"left right\" with exactly one space");

  j = tiny_tokenizer(false);
  j["normalizer"] = {{"type", "NFKC"}};
  expect_error("nfkc.json", j, "normalizer.type: unsupported 'NFKC'");

  j = tiny_tokenizer(false);
  j["pre_tokenizer"]["add_prefix_space"] = true;
  expect_error("prefix.json", j, "pre_tokenizer.add_prefix_space");

  j = tiny_tokenizer(false);
  j["model"]["dropout"] = 0.1;
  expect_error("dropout.json", j, "model.dropout");

  j = tiny_tokenizer(false);
  j["model"]["vocab"].erase("Ġ");
  expect_error("no_space_byte.json", j, "for byte 0x20");

  j = tiny_tokenizer(false);
  j["added_tokens"][0].erase("normalized");
  expect_error("added.json", j, "added_tokens[0].normalized: missing");

  testing::write_text(dir.file("broken.json"), "{ \"model\": ");
  EXPECT_NE(load_error(dir.file("broken.json")).find("not valid JSON"), std::string::npos);
  EXPECT_NE(load_error(dir.file("absent.json")).find(dir.file("absent.json") + ": cannot open"), std::string::npos);
}

}  // namespace
}  // namespace fca
