// The GPT-NeoX-20B byte-level BPE tokenizer that Pythia and MUDDPythia use, read from a Hugging Face
// tokenizer.json and encoding exactly as Hugging Face `tokenizers` does (docs/mudd.md,
// "Tokenizer"; tests/tokenizer_test.cpp checks these rules on its 47 cases):
//   1. split the text on the added tokens with `normalized: false` (leftmost-longest);
//   2. NFC every remaining piece;
//   3. split those on the added tokens with `normalized: true` (NeoX: runs of 2..24 spaces);
//   4. split the rest with the GPT-2 pattern
//      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   5. BPE each piece's UTF-8 bytes, merging the lowest-rank adjacent pair, leftmost first.
// No BOS or EOS is added. Only the settings that file uses are supported; anything else in a
// tokenizer.json (another normalizer, add_prefix_space, BPE dropout, ...) is rejected at load.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fca {

class BpeTokenizer {
 public:
  // Throws Error naming the file and the JSON field when the file is missing, is not JSON, lacks
  // a field, refers to an unknown token, or asks for a setting this implementation lacks.
  static BpeTokenizer load(const std::string& tokenizer_json_path);

  ~BpeTokenizer();
  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;

  // Token ids of `utf8_text`. Hugging Face takes a Rust &str, which is valid UTF-8 by construction;
  // here invalid UTF-8 (a stray or truncated sequence, an overlong form, a surrogate, a code point
  // above U+10FFFF) throws Error naming the byte offset rather than being guessed at.
  // Safe to call from several threads at once (the word cache is locked).
  std::vector<int32_t> encode(const std::string& utf8_text) const;
  // The bytes the ids stand for, added tokens as their content, as the ByteLevel decoder does but
  // without replacing invalid UTF-8 (a cut through a multi-byte character stays as raw bytes).
  // Throws Error on an id that is no token.
  std::string decode(const std::vector<int32_t>& ids) const;
  int vocab_size() const;  // highest id + 1, counting the added tokens (50277 for GPT-NeoX-20B)

 private:
  struct Impl;
  explicit BpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical
// composition) with the tables in unicode_tables.cpp.
std::u32string nfc(const std::u32string& text);

}  // namespace fca
