#include "data/corpus.h"

#include "core/error.h"
#include "core/sha256.h"

#ifndef FCA_DEFAULT_DATA_DIR
#define FCA_DEFAULT_DATA_DIR "data/nlp-corpus"
#endif

namespace fca {

TextSplit::TextSplit(const std::string& name, const std::string& path)
    : name_(name), file_(std::make_unique<MappedFile>(path)) {}

int64_t TextSplit::window_count(int T) const {
  if (size() < size_t(T) + 1)
    throw Error(path() + ": the " + name_ + " split has " + std::to_string(size()) +
                " bytes, shorter than one window of T+1 = " + std::to_string(T + 1) + " bytes");
  return int64_t((size() - 1) / size_t(T));
}

void TextSplit::window_at(size_t start, int T, int32_t* inputs, int32_t* targets) const {
  if (start + size_t(T) + 1 > size())
    throw Error(path() + ": window at byte " + std::to_string(start) + " runs past the end (" + std::to_string(size()) +
                " bytes)");
  const unsigned char* p = bytes() + start;
  for (int t = 0; t < T; ++t) {
    inputs[t] = p[t];
    targets[t] = p[t + 1];
  }
}

void TextSplit::window(int64_t index, int T, int32_t* inputs, int32_t* targets) const {
  window_at(size_t(index) * size_t(T), T, inputs, targets);
}

std::string TextSplit::content_hash() const {
  std::call_once(hash_once_, [this] { hash_ = sha256_hex(bytes(), size()); });
  return hash_;
}

Corpus::Corpus(const std::string& dir) : dir_(dir) {
  if (!is_directory(dir)) throw Error(dir + ": data folder does not exist or is not a folder");
  // Fail early, naming what is missing, rather than at the first use of a split.
  for (const char* s : {"train", "valid", "test"}) {
    const std::string plain = dir + "/" + s + ".txt", wiki = dir + "/wiki." + s + ".raw";
    if (!file_exists(plain) && !file_exists(wiki))
      throw Error(dir + ": no " + s + " split (looked for " + s + ".txt and wiki." + s + ".raw)");
  }
}

const TextSplit& Corpus::split(const std::string& name) const {
  if (name != "train" && name != "valid" && name != "test")
    throw Error("unknown split '" + name + "' (expected train, valid or test)");
  const std::lock_guard<std::mutex> lock(open_mutex_);  // const, and callable from several threads
  for (const auto& s : open_)
    if (s->name() == name) return *s;
  const std::string plain = dir_ + "/" + name + ".txt";
  const std::string path = file_exists(plain) ? plain : dir_ + "/wiki." + name + ".raw";
  open_.push_back(std::make_unique<TextSplit>(name, path));
  return *open_.back();
}

std::string default_corpus_dir() {
  if (is_directory("data/nlp-corpus")) return "data/nlp-corpus";
  if (is_directory(FCA_DEFAULT_DATA_DIR)) return FCA_DEFAULT_DATA_DIR;
  throw Error("no --data given and the default corpus is not at data/nlp-corpus or " FCA_DEFAULT_DATA_DIR
              ": fetch it with scripts/fetch_corpus.sh (or make data)");
}

std::vector<int64_t> evenly_spaced_windows(int64_t available, int64_t wanted, const std::string& split_name) {
  if (wanted <= 0) throw Error("the number of windows must be positive, found " + std::to_string(wanted));
  if (wanted > available)
    throw Error("asked for " + std::to_string(wanted) + " windows but the " + split_name + " split has only " +
                std::to_string(available));
  std::vector<int64_t> out(static_cast<size_t>(wanted));
  for (int64_t k = 0; k < wanted; ++k) out[size_t(k)] = int64_t((__int128)k * available / wanted);
  return out;
}

WindowSet make_windows(const std::vector<int32_t>& tokens, const TextSplit& split, int T, int wanted) {
  if (tokens.size() < size_t(T) + 1)
    throw Error(split.path() + ": the " + split.name() + " split has " + std::to_string(tokens.size()) +
                " tokens, shorter than one window of T+1 = " + std::to_string(T + 1));
  const int64_t available = int64_t((tokens.size() - 1) / size_t(T));
  WindowSet w;
  w.tokens = T;
  w.indices = evenly_spaced_windows(available, wanted, split.name());
  for (int64_t idx : w.indices) {
    const int32_t* p = tokens.data() + idx * T;
    w.inputs.insert(w.inputs.end(), p, p + T);
    w.targets.insert(w.targets.end(), p + 1, p + T + 1);
  }
  return w;
}

}  // namespace fca
