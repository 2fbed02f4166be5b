#include "models/mudd/tokenizer.h"

#include <array>
#include <cstdio>
#include <fstream>
#include <mutex>
#include "core/json.h"
#include <optional>
#include <queue>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "models/mudd/unicode_tables.h"

namespace fca {
namespace {

using nlohmann::json;

// Concatenates message parts with += (GCC 12 reports a false -Wrestrict on "literal" + std::string).
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::string out;
  (out += ... += parts);
  return out;
}

std::string hex_byte(unsigned char b) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02X", b);
  return text;
}

// Decodes strictly, as Rust's str does: no overlong forms, surrogates or code points past
// U+10FFFF. `base` is the offset of `bytes` in the caller's text, so errors point into it.
std::u32string decode_utf8(std::string_view bytes, size_t base, const std::string& what) {
  std::u32string out;
  out.reserve(bytes.size());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    const auto b0 = static_cast<unsigned char>(bytes[i]);
    if (b0 < 0x80) {
      out.push_back(b0);
      ++i;
      continue;
    }
    size_t length = 0;
    char32_t c = 0;
    unsigned char low = 0x80, high = 0xBF;  // allowed range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      length = 2, c = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      length = 3, c = b0 & 0x0F;
      if (b0 == 0xE0) low = 0xA0;   // overlong below U+0800
      if (b0 == 0xED) high = 0x9F;  // surrogates U+D800..U+DFFF
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      length = 4, c = b0 & 0x07;
      if (b0 == 0xF0) low = 0x90;   // overlong below U+10000
      if (b0 == 0xF4) high = 0x8F;  // above U+10FFFF
    }
    bool valid = length != 0 && i + length <= n;
    for (size_t k = 1; valid && k < length; ++k) {
      const auto b = static_cast<unsigned char>(bytes[i + k]);
      valid = b >= (k == 1 ? low : 0x80) && b <= (k == 1 ? high : 0xBF);
      c = (c << 6) | (b & 0x3F);
    }
    if (!valid)
      throw Error(cat(what, " is not valid UTF-8: the sequence starting with byte ", hex_byte(b0), " at byte offset ",
                      std::to_string(base + i), " is malformed or truncated"));
    out.push_back(c);
    i += length;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// Hangul syllables decompose and compose by arithmetic (Unicode §3.12), not through the tables.
constexpr char32_t kSyllableFirst = 0xAC00, kLeadFirst = 0x1100, kVowelFirst = 0x1161, kTrailBase = 0x11A7;
constexpr char32_t kLeadCount = 19, kVowelCount = 21, kTrailCount = 28;
constexpr char32_t kSyllableCount = kLeadCount * kVowelCount * kTrailCount;  // 11172

struct Mark {
  char32_t code;
  uint8_t combining_class;
};

void decompose(char32_t c, std::vector<Mark>& out) {
  if (c >= kSyllableFirst && c < kSyllableFirst + kSyllableCount) {
    const char32_t s = c - kSyllableFirst;
    out.push_back({kLeadFirst + s / (kVowelCount * kTrailCount), 0});
    out.push_back({kVowelFirst + (s % (kVowelCount * kTrailCount)) / kTrailCount, 0});
    if (s % kTrailCount != 0) out.push_back({kTrailBase + s % kTrailCount, 0});
    return;
  }
  const auto [first, second] = unicode::canonical_mapping(c);
  if (first == 0) {
    out.push_back({c, unicode::combining_class(c)});
    return;
  }
  decompose(first, out);
  if (second != 0) decompose(second, out);
}

char32_t compose(char32_t first, char32_t second) {
  if (second < unicode::kNfcStableBelow) return 0;  // never the second half of a pair
  if (first >= kLeadFirst && first < kLeadFirst + kLeadCount && second >= kVowelFirst &&
      second < kVowelFirst + kVowelCount)
    return kSyllableFirst + ((first - kLeadFirst) * kVowelCount + (second - kVowelFirst)) * kTrailCount;
  if (first >= kSyllableFirst && first < kSyllableFirst + kSyllableCount && (first - kSyllableFirst) % kTrailCount == 0 &&
      second > kTrailBase && second < kTrailBase + kTrailCount)
    return first + (second - kTrailBase);
  return unicode::compose_pair(first, second);
}

// NFC of one segment, appended to `out`; `work` is scratch space reused across segments.
void normalize_segment(std::u32string_view segment, std::vector<Mark>& work, std::u32string& out) {
  work.clear();
  for (char32_t c : segment) decompose(c, work);
  // Canonical ordering: a stable insertion sort of each run of non-starters by combining class.
  for (size_t i = 1; i < work.size(); ++i) {
    const Mark m = work[i];
    if (m.combining_class == 0) continue;
    size_t j = i;
    for (; j > 0 && work[j - 1].combining_class > m.combining_class; --j) work[j] = work[j - 1];
    work[j] = m;
  }
  // Canonical composition: a character joins the last starter unless a kept character between
  // them blocks it (class 0, or a class not below its own; after ordering, the last kept one
  // has the highest class, so it is the only one to check).
  size_t starter = SIZE_MAX, kept = 0;
  for (size_t i = 0; i < work.size(); ++i) {
    const Mark m = work[i];
    if (starter != SIZE_MAX) {
      const uint8_t last = work[kept - 1].combining_class;
      if (kept - 1 == starter || (last != 0 && last < m.combining_class)) {
        if (const char32_t composite = compose(work[starter].code, m.code)) {
          work[starter].code = composite;
          continue;
        }
      }
    }
    if (m.combining_class == 0) starter = kept;
    work[kept++] = m;
  }
  for (size_t i = 0; i < kept; ++i) out.push_back(work[i].code);
}

// The added tokens of one kind in a trie, for leftmost-longest matching (as Hugging Face's
// aho-corasick matcher with MatchKind::LeftmostLongest): at each position the longest token
// starting there wins, and the scan resumes after it. Char is char for raw UTF-8, char32_t after NFC.
template <class Char>
class TokenTrie {
 public:
  void add(std::basic_string_view<Char> content, int32_t id) {
    size_t node = 0;
    for (Char c : content) {
      size_t child = find_child(node, c);
      if (child == 0) {
        child = nodes_.size();
        nodes_[node].children.push_back({c, child});
        nodes_.emplace_back();
      }
      node = child;
    }
    nodes_[node].id = id;
  }

  // Calls on_text(view) for each stretch between matches and on_token(id) for each match, in order.
  template <class OnText, class OnToken>
  void split(std::basic_string_view<Char> text, OnText on_text, OnToken on_token) const {
    size_t start = 0, i = 0;
    while (i < text.size()) {
      size_t node = 0, match_end = 0;
      int32_t match_id = -1;
      for (size_t k = i; k < text.size() && (node = find_child(node, text[k])) != 0; ++k) {
        if (nodes_[node].id >= 0) match_end = k + 1, match_id = nodes_[node].id;
      }
      if (match_id < 0) {
        ++i;
        continue;
      }
      if (i > start) on_text(text.substr(start, i - start));
      on_token(match_id);
      start = i = match_end;
    }
    if (start < text.size()) on_text(text.substr(start));
  }

 private:
  struct Node {
    std::vector<std::pair<Char, size_t>> children;
    int32_t id = -1;
  };
  // 0 when absent: the root is never anyone's child.
  size_t find_child(size_t node, Char c) const {
    for (const auto& [key, child] : nodes_[node].children)
      if (key == c) return child;
    return 0;
  }
  std::vector<Node> nodes_ = std::vector<Node>(1);
};

enum class CharClass : uint8_t { letter, number, space, other };

CharClass classify(char32_t c) {
  if (c < 0x80) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::letter;
    if (c >= '0' && c <= '9') return CharClass::number;
    if (c == ' ' || (c >= '\t' && c <= '\r')) return CharClass::space;
    return CharClass::other;
  }
  if (unicode::is_whitespace(c)) return CharClass::space;
  if (unicode::is_letter(c)) return CharClass::letter;
  if (unicode::is_number(c)) return CharClass::number;
  return CharClass::other;
}

// Calls emit(begin, end) for each match of the GPT-2 pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// over `text`, left to right, with the backtracking engine's alternative order. Every character
// is in one of the classes, so the matches tile the text.
template <class Emit>
void split_words(std::u32string_view text, std::vector<CharClass>& classes, Emit emit) {
  const size_t n = text.size();
  classes.resize(n);
  for (size_t i = 0; i < n; ++i) classes[i] = classify(text[i]);
  auto run_end = [&](size_t i, CharClass cls) {
    while (i < n && classes[i] == cls) ++i;
    return i;
  };
  size_t i = 0;
  while (i < n) {
    size_t end = 0;
    if (text[i] == '\'' && i + 1 < n) {
      const char32_t a = text[i + 1], b = i + 2 < n ? text[i + 2] : 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        end = i + 2;
      } else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
        end = i + 3;
      }
    }
    if (end == 0) {
      // ` ?X+`: the optional space is U+0020 only; without it a space could not start X+.
      const size_t j = text[i] == ' ' && i + 1 < n && classes[i + 1] != CharClass::space ? i + 1 : i;
      if (classes[j] != CharClass::space) {
        end = run_end(j, classes[j]);
      } else {
        // \s+(?!\S): the whitespace run, less its last character when a non-space follows;
        // a lone whitespace character before a non-space falls to the final \s+.
        const size_t k = run_end(i, CharClass::space);
        end = k == n || k - 1 == i ? k : k - 1;
      }
    }
    emit(i, end);
    i = end;
  }
}

// GPT-2's byte -> character map: printable Latin-1 bytes stand for themselves, the other 68 bytes
// for U+0100.. in byte order, so that every vocabulary entry is printable text.
std::array<char32_t, 256> byte_characters() {
  std::array<char32_t, 256> table{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

// The bytes a token string stands for, as the ByteLevel decoder computes them: mapped back
// through the byte alphabet when every character is in it, else the string's own UTF-8 (added
// tokens such as a run of spaces).
std::string token_bytes(const std::string& token, const std::u32string& characters) {
  static const std::unordered_map<char32_t, char> to_byte = [] {
    std::unordered_map<char32_t, char> m;
    const auto table = byte_characters();
    for (int b = 0; b < 256; ++b) m[table[b]] = static_cast<char>(b);
    return m;
  }();
  std::string out;
  for (char32_t c : characters) {
    const auto it = to_byte.find(c);
    if (it == to_byte.end()) return token;
    out += it->second;
  }
  return out;
}

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

std::u32string nfc(const std::u32string& text) {
  // A character below kNfcStableBelow starts a segment that nothing before it interacts with, so
  // NFC works segment by segment and a segment of one such character is copied as it is.
  std::u32string out;
  out.reserve(text.size());
  std::vector<Mark> work;
  size_t i = 0;
  while (i < text.size()) {
    size_t end = i + 1;
    while (end < text.size() && text[end] >= unicode::kNfcStableBelow) ++end;
    if (end == i + 1 && text[i] < unicode::kNfcStableBelow) {
      out.push_back(text[i]);
    } else {
      normalize_segment(std::u32string_view(text).substr(i, end - i), work, out);
    }
    i = end;
  }
  return out;
}

struct BpeTokenizer::Impl {
  struct Merge {
    int32_t rank;
    int32_t id;  // the merged token
  };

  bool normalize_nfc = false;
  TokenTrie<char> raw_tokens;             // added tokens with normalized: false
  TokenTrie<char32_t> normalized_tokens;  // added tokens with normalized: true, matched after NFC
  std::array<int32_t, 256> byte_ids{};    // the token of each single byte (-1: never in UTF-8)
  std::unordered_map<uint64_t, Merge> merges;  // by pair_key(left id, right id)
  std::unordered_map<int32_t, std::string> id_bytes;
  int32_t vocab_size = 0;

  // BPE results by word (its UTF-8 bytes), shared by all calls; once full, it only serves.
  static constexpr size_t kCacheCapacity = 1 << 16, kCacheWordBytes = 256;
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  void encode_piece(std::u32string_view piece, std::vector<int32_t>& ids) const;
  void encode_word(const std::string& word, std::vector<int32_t>& ids) const;
  void bpe(const std::string& word, std::vector<int32_t>& ids) const;
};

void BpeTokenizer::Impl::encode_piece(std::u32string_view piece, std::vector<int32_t>& ids) const {
  std::vector<CharClass> classes;
  std::string word;
  split_words(piece, classes, [&](size_t begin, size_t end) {
    word.clear();
    for (size_t k = begin; k < end; ++k) append_utf8(word, piece[k]);
    encode_word(word, ids);
  });
}

void BpeTokenizer::Impl::encode_word(const std::string& word, std::vector<int32_t>& ids) const {
  if (word.size() == 1) {
    ids.push_back(byte_ids[static_cast<unsigned char>(word[0])]);
    return;
  }
  const bool cacheable = word.size() <= kCacheWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mutex);
    const auto it = cache.find(word);
    if (it != cache.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = ids.size();
  bpe(word, ids);
  if (cacheable) {
    std::lock_guard lock(cache_mutex);
    if (cache.size() < kCacheCapacity) cache.emplace(word, std::vector<int32_t>(ids.begin() + first, ids.end()));
  }
}

// Merges the word's byte tokens, always the adjacent pair of lowest merge rank, leftmost among
// equal ranks, through a heap of candidate pairs; a candidate whose pair has changed since it was
// queued is dropped when popped. O(n log n) in the word's bytes, so long words stay cheap.
void BpeTokenizer::Impl::bpe(const std::string& word, std::vector<int32_t>& ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // neighbours still alive, -1 at the ends
    bool alive;
  };
  struct Candidate {
    int32_t rank, pos, id;  // pos: the left symbol
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const auto n = static_cast<int32_t>(word.size());
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i)
    symbols[i] = {byte_ids[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1, true};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto offer = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    const auto it = merges.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges.end()) queue.push({it->second.rank, left, it->second.id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) offer(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    const auto it = merges.find(pair_key(left.id, symbols[left.next].id));
    if (it == merges.end() || it->second.id != top.id) continue;
    Symbol& right = symbols[left.next];
    right.alive = false;
    left.id = top.id;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) offer(left.prev);
    offer(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

BpeTokenizer::BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BpeTokenizer::~BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;

int BpeTokenizer::vocab_size() const { return impl_->vocab_size; }

std::vector<int32_t> BpeTokenizer::encode(const std::string& utf8_text) const {
  std::vector<int32_t> ids;
  const std::string_view text(utf8_text);
  auto push_id = [&](int32_t id) { ids.push_back(id); };
  impl_->raw_tokens.split(
      text,
      [&](std::string_view piece) {
        std::u32string chars = decode_utf8(piece, static_cast<size_t>(piece.data() - text.data()), "tokenizer input");
        if (impl_->normalize_nfc) chars = nfc(chars);
        impl_->normalized_tokens.split(
            std::u32string_view(chars), [&](std::u32string_view rest) { impl_->encode_piece(rest, ids); }, push_id);
      },
      push_id);
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    const auto it = impl_->id_bytes.find(id);
    if (it == impl_->id_bytes.end()) {
      throw Error(cat("decode: id ", std::to_string(id), " is not a token of this tokenizer (vocab size ",
                      std::to_string(impl_->vocab_size), ")"));
    }
    out += it->second;
  }
  return out;
}

namespace {

// Reads one tokenizer.json, every message naming the file and the JSON field.
class Loader {
 public:
  explicit Loader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
    throw Error(cat(path_, ": ", field, ": ", problem));
  }

  json parse() const {
    std::ifstream in(path_, std::ios::binary);
    if (!in) throw Error(cat(path_, ": cannot open the tokenizer file"));
    try {
      json j = json::parse(in);
      if (!j.is_object()) fail("(top level)", cat("expected a JSON object, found ", j.type_name()));
      return j;
    } catch (const json::exception& e) {
      throw Error(cat(path_, ": not valid JSON (", e.what(), ")"));
    }
  }

  const json& member(const json& object, const std::string& key, const std::string& field) const {
    const auto it = object.find(key);
    if (it == object.end()) fail(field, "missing");
    return *it;
  }

  // The string value of object[key] when present and not null; nullopt otherwise.
  std::optional<std::string> optional_string(const json& object, const std::string& key, const std::string& field) const {
    const auto it = object.find(key);
    if (it == object.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) fail(field, cat("expected a string, found ", it->type_name()));
    return it->get<std::string>();
  }

  bool boolean(const json& object, const std::string& key, const std::string& field, std::optional<bool> fallback) const {
    const auto it = object.find(key);
    if (it == object.end() && fallback) return *fallback;
    if (it == object.end()) fail(field, "missing");
    if (!it->is_boolean()) fail(field, cat("expected true or false, found ", it->type_name()));
    return it->get<bool>();
  }

  int32_t token_id(const json& value, const std::string& field) const {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > INT32_MAX)
      fail(field, cat("expected a token id (an integer in 0..2^31-1), found ", value.dump()));
    return static_cast<int32_t>(value.get<int64_t>());
  }

  // Requires object[key], when present and not null, to be {"type": one of allowed, ...}.
  std::string component_type(const json& root, const std::string& key, const std::vector<std::string>& allowed) const {
    const auto it = root.find(key);
    if (it == root.end() || it->is_null()) return "";
    const std::string type = optional_string(*it, "type", key + ".type").value_or("(none)");
    for (const auto& a : allowed)
      if (type == a) return type;
    std::string expected;
    for (const auto& a : allowed) expected += cat(a, " or ");
    fail(key + ".type", cat("unsupported '", type, "' (expected ", expected, "null)"));
  }

 private:
  std::string path_;
};

}  // namespace

namespace {

using Vocab = std::unordered_map<std::string, int32_t>;

// The pipeline around the model: no truncation or padding, NFC or no normalizer, the ByteLevel
// pre-tokenizer without a prefix space, ByteLevel post-processing and decoding; a plain BPE model.
// (A ByteLevel post-processor only adjusts offsets; others would add BOS/EOS ids.) Templates over
// the tokenizer's private state, which they fill.
template <typename State>
void check_pipeline(const Loader& loader, const json& root, State& impl) {
  for (const char* key : {"truncation", "padding"}) {
    const auto it = root.find(key);
    if (it != root.end() && !it->is_null()) loader.fail(key, "must be null: truncation and padding are not supported");
  }
  impl.normalize_nfc = loader.component_type(root, "normalizer", {"NFC"}) == "NFC";
  if (loader.component_type(root, "pre_tokenizer", {"ByteLevel"}).empty())
    loader.fail("pre_tokenizer", "missing: a byte-level BPE needs the ByteLevel pre-tokenizer");
  const json& pre = root.at("pre_tokenizer");
  if (loader.boolean(pre, "add_prefix_space", "pre_tokenizer.add_prefix_space", std::nullopt))
    loader.fail("pre_tokenizer.add_prefix_space", "unsupported true (expected false)");
  if (!loader.boolean(pre, "use_regex", "pre_tokenizer.use_regex", true))
    loader.fail("pre_tokenizer.use_regex", "unsupported false (expected true)");
  loader.component_type(root, "post_processor", {"ByteLevel"});
  loader.component_type(root, "decoder", {"ByteLevel"});

  const json& model = loader.member(root, "model", "model");
  if (!model.is_object()) loader.fail("model", cat("expected an object, found ", model.type_name()));
  if (const auto type = loader.optional_string(model, "type", "model.type"); type && *type != "BPE")
    loader.fail("model.type", cat("unsupported '", *type, "' (expected BPE)"));
  if (model.contains("dropout") && !model.at("dropout").is_null()) loader.fail("model.dropout", "BPE dropout is not supported (expected null)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const std::string field = std::string("model.") + key;
    if (!loader.optional_string(model, key, field).value_or("").empty()) loader.fail(field, "unsupported (expected null)");
  }
  for (const char* key : {"ignore_merges", "byte_fallback"}) {
    const std::string field = std::string("model.") + key;
    if (loader.boolean(model, key, field, false)) loader.fail(field, "unsupported true (expected false)");
  }
}

// Vocabulary: token string -> id; the bytes of every id, for decode.
template <typename State>
Vocab read_vocab(const Loader& loader, const json& model, const std::string& path, State& impl) {
  const json& vocab_json = loader.member(model, "vocab", "model.vocab");
  if (!vocab_json.is_object()) loader.fail("model.vocab", cat("expected an object, found ", vocab_json.type_name()));
  Vocab vocab;
  vocab.reserve(vocab_json.size());
  for (const auto& [token, value] : vocab_json.items()) {
    const std::string field = cat("model.vocab[\"", token, "\"]");
    const int32_t id = loader.token_id(value, field);
    const std::u32string chars = decode_utf8(token, 0, path + " " + field);
    if (!impl.id_bytes.emplace(id, token_bytes(token, chars)).second)
      loader.fail(field, cat("id ", std::to_string(id), " is used by another token too"));
    vocab.emplace(token, id);
    impl.vocab_size = std::max(impl.vocab_size, id + 1);
  }
  return vocab;
}

// Every byte that valid UTF-8 can hold needs a token, so that encode never meets an unknown
// symbol (Hugging Face would silently drop it). The 13 others, 0xC0, 0xC1 and 0xF5..0xFF, may
// be missing, and are in GPT-NeoX-20B; they keep the id -1, which encode never reads.
template <typename State>
void read_byte_ids(const Loader& loader, const Vocab& vocab, State& impl) {
  const auto characters = byte_characters();
  impl.byte_ids.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (b == 0xC0 || b == 0xC1 || b >= 0xF5) continue;
    std::string token;
    append_utf8(token, characters[b]);
    const auto it = vocab.find(token);
    if (it == vocab.end())
      loader.fail("model.vocab", cat("no token \"", token, "\" for byte ", hex_byte(static_cast<unsigned char>(b)),
                                     " (a byte-level vocabulary needs every byte that UTF-8 text can hold)"));
    impl.byte_ids[b] = it->second;
  }
}

// Merges, as "left right" strings (older files) or ["left", "right"] pairs (newer ones); the
// rank is the position. A repeated pair keeps its last rank, as Hugging Face's map does.
template <typename State>
void read_merges(const Loader& loader, const json& model, const Vocab& vocab, State& impl) {
  const json& merges = loader.member(model, "merges", "model.merges");
  if (!merges.is_array()) loader.fail("model.merges", cat("expected an array, found ", merges.type_name()));
  impl.merges.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string field = cat("model.merges[", std::to_string(rank), "]");
    const json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        loader.fail(field, cat("expected \"left right\" with exactly one space, found ", m.dump()));
      left = s.substr(0, space), right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>(), right = m[1].get<std::string>();
    } else {
      loader.fail(field, cat("expected \"left right\" or [\"left\", \"right\"], found ", m.dump()));
    }
    auto lookup = [&](const std::string& token) {
      const auto it = vocab.find(token);
      if (it == vocab.end()) loader.fail(field, cat("token \"", token, "\" is not in model.vocab"));
      return it->second;
    };
    const int32_t left_id = lookup(left), right_id = lookup(right), merged_id = lookup(left + right);
    impl.merges[pair_key(left_id, right_id)] = {static_cast<int32_t>(rank), merged_id};
  }
}

// Added tokens: matched before (normalized: false) or after (true) NFC, never split further.
template <typename State>
void read_added_tokens(const Loader& loader, const json& root, const Vocab& vocab, const std::string& path, State& impl) {
  if (root.contains("added_tokens") && !root.at("added_tokens").is_null()) {
    const json& added = root.at("added_tokens");
    if (!added.is_array()) loader.fail("added_tokens", cat("expected an array, found ", added.type_name()));
    for (size_t k = 0; k < added.size(); ++k) {
      const std::string field = cat("added_tokens[", std::to_string(k), "]");
      const json& t = added[k];
      if (!t.is_object()) loader.fail(field, cat("expected an object, found ", t.type_name()));
      const int32_t id = loader.token_id(loader.member(t, "id", field + ".id"), field + ".id");
      const std::string content = loader.optional_string(t, "content", field + ".content").value_or("");
      if (content.empty()) loader.fail(field + ".content", "missing or empty");
      loader.boolean(t, "special", field + ".special", std::nullopt);
      const bool normalized = loader.boolean(t, "normalized", field + ".normalized", std::nullopt);
      for (const char* key : {"lstrip", "rstrip", "single_word"})
        if (loader.boolean(t, key, field + "." + key, false)) loader.fail(field + "." + key, "unsupported true (expected false)");
      if (const auto it = vocab.find(content); it != vocab.end() && it->second != id)
        loader.fail(field + ".id", cat(std::to_string(id), " but model.vocab gives \"", content, "\" id ", std::to_string(it->second)));
      const std::u32string chars = decode_utf8(content, 0, path + " " + field + ".content");
      impl.id_bytes[id] = token_bytes(content, chars);
      impl.vocab_size = std::max(impl.vocab_size, id + 1);
      if (normalized) {
        impl.normalized_tokens.add(impl.normalize_nfc ? nfc(chars) : chars, id);
      } else {
        impl.raw_tokens.add(content, id);
      }
    }
  }
}

}  // namespace

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  const Loader loader(path);
  const json root = loader.parse();
  auto impl = std::make_unique<Impl>();
  check_pipeline(loader, root, *impl);
  const json& model = loader.member(root, "model", "model");
  const Vocab vocab = read_vocab(loader, model, path, *impl);
  read_byte_ids(loader, vocab, *impl);
  read_merges(loader, model, vocab, *impl);
  read_added_tokens(loader, root, vocab, path, *impl);
  return BpeTokenizer(std::move(impl));
}

}  // namespace fca
