// Byte-level text corpora: a folder with train.txt / valid.txt / test.txt, or the WikiText raw
// layout (wiki.train.raw, ...). Splits are memory-mapped raw bytes (no decoding), and windows follow
// docs/data.md: window i of a split covers bytes [i*T, i*T + T + 1); inputs are its first T bytes,
// targets its last T.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/file_io.h"

namespace fca {

class TextSplit {
 public:
  // Maps the file; throws Error naming it when missing or unreadable.
  TextSplit(const std::string& name, const std::string& path);
  const std::string& name() const { return name_; }
  const std::string& path() const { return file_->path(); }
  size_t size() const { return file_->size(); }
  const unsigned char* bytes() const { return file_->data(); }
  // M = floor((size - 1) / T); throws Error when the split is shorter than one window (T + 1 bytes).
  int64_t window_count(int T) const;
  // Fills inputs/targets [T] of window `index` (bytes [index*T, index*T + T + 1)).
  void window(int64_t index, int T, int32_t* inputs, int32_t* targets) const;
  // Fills inputs/targets [T] of the T+1 bytes starting at byte `start`.
  void window_at(size_t start, int T, int32_t* inputs, int32_t* targets) const;
  std::string content_hash() const;  // SHA-256 of the bytes (computed once, then cached)

 private:
  std::string name_;
  std::unique_ptr<MappedFile> file_;
  // Computed on first use (hashing a split costs a pass over it), once, whichever thread asks.
  mutable std::once_flag hash_once_;
  mutable std::string hash_;
};

class Corpus {
 public:
  // dir: a folder holding the splits. Throws Error naming the folder and the file names looked for.
  explicit Corpus(const std::string& dir);
  const std::string& dir() const { return dir_; }
  // name: "train", "valid" or "test"; opened on first use.
  const TextSplit& split(const std::string& name) const;

 private:
  std::string dir_;
  mutable std::mutex open_mutex_;  // guards open_; the splits themselves never move (unique_ptr)
  mutable std::vector<std::unique_ptr<TextSplit>> open_;
};

// The folder used when no --data is given: ./data/nlp-corpus if present, else the source tree's
// data/nlp-corpus (fetched by scripts/fetch_corpus.sh). Throws Error saying how to fetch it.
std::string default_corpus_dir();

// N evenly spaced window indices out of M: k -> floor(k * M / N). N > M is an error (naming both).
std::vector<int64_t> evenly_spaced_windows(int64_t available, int64_t wanted, const std::string& split_name);

// Token windows of one set: inputs and targets [windows, T].
struct WindowSet {
  std::vector<int64_t> indices;
  std::vector<int32_t> inputs, targets;
  int tokens = 0;
  int batch = 0;  // windows per forward pass: fixed so that replays see the same batch composition
  int count() const { return int(indices.size()); }
};

// `wanted` evenly spaced windows of T+1 tokens of a tokenized split (targets shifted by one), as
// docs/data.md lays them out: window i covers tokens [i*T, i*T + T + 1). `split` names the split in errors.
WindowSet make_windows(const std::vector<int32_t>& tokens, const TextSplit& split, int T, int wanted);

}  // namespace fca
