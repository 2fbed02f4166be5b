// A libFuzzer target without libFuzzer: runs the target's LLVMFuzzerTestOneInput on every seed file
// given (files, or folders of them) and on deterministic mutants of each (byte changes, 8-byte
// lengths set to edge values, cuts, repeated and removed slices), so that `make test` and the
// sanitizer suite run every fuzz target with the compiler and flags of the build (GCC, -Werror,
// ASan/UBSan) where `make fuzz` (clang, coverage-guided) does not run. A crash, a sanitizer report
// or an exception other than fca::Error (the target lets it escape) fails the run.
//   <target>_replay [--mutants N] [--seed S] SEED...
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// splitmix64, started from --seed and the seed file's name (FNV-1a): the mutants of one seed file
// are the same on every machine and run.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n == 0 ? 0 : size_t(next() % n); }
};

std::vector<uint8_t> mutant(const std::vector<uint8_t>& seed, Rng& rng) {
  std::vector<uint8_t> m = seed;
  const int edits = 1 + int(rng.below(3));
  for (int e = 0; e < edits; ++e) {
    const size_t at = rng.below(m.size() + 1);
    switch (rng.below(6)) {
      case 0:  // a few bytes to random values
        for (size_t i = 0, n = 1 + rng.below(4); i < n && !m.empty(); ++i) m[rng.below(m.size())] = uint8_t(rng.next());
        break;
      case 1: {  // an 8-byte little-endian field (framing lengths, header lengths) to an edge value
        static const uint64_t edge[] = {0, 1, 7, 8, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 0x100000000ull, uint64_t(1) << 62,
                                        ~uint64_t(0)};
        const uint64_t v = edge[rng.below(std::size(edge))];
        if (m.size() >= 8) std::memcpy(m.data() + std::min(at, m.size() - 8), &v, 8);
        break;
      }
      case 2:  // cut the end
        m.resize(at);
        break;
      case 3: {  // remove a slice
        const size_t n = std::min(m.size() - std::min(at, m.size()), rng.below(64) + 1);
        m.erase(m.begin() + std::ptrdiff_t(std::min(at, m.size())), m.begin() + std::ptrdiff_t(std::min(at, m.size()) + n));
        break;
      }
      case 4: {  // repeat a slice
        const size_t from = rng.below(m.size() + 1), n = std::min(m.size() - from, rng.below(64) + 1);
        const std::vector<uint8_t> slice(m.begin() + std::ptrdiff_t(from), m.begin() + std::ptrdiff_t(from + n));
        m.insert(m.begin() + std::ptrdiff_t(std::min(at, m.size())), slice.begin(), slice.end());
        break;
      }
      default: {  // an ASCII digit or JSON character where text was (numbers, brackets, quotes)
        static const char text[] = "0123456789-.eE{}[]\",:nt";
        if (!m.empty()) m[rng.below(m.size())] = uint8_t(text[rng.below(sizeof(text) - 1)]);
      }
    }
  }
  return m;
}

bool read_file(const std::filesystem::path& path, std::vector<uint8_t>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  long mutants = 100;
  uint64_t seed = 1;
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--mutants" || a == "--seed") && i + 1 < argc) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(argv[++i], &end, 10);
      if (end == argv[i] || *end != '\0') {
        std::fprintf(stderr, "%s: %s \"%s\" is not a non-negative integer\n", argv[0], a.c_str(), argv[i]);
        return 2;
      }
      (a == "--mutants" ? void(mutants = long(v)) : void(seed = v));
    } else if (std::filesystem::is_directory(a)) {
      for (const auto& entry : std::filesystem::directory_iterator(a))
        if (entry.is_regular_file()) files.push_back(entry.path());
    } else {
      files.emplace_back(a);
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s [--mutants N] [--seed S] SEED_FILE_OR_FOLDER...: no seed given\n", argv[0]);
    return 2;
  }
  long runs = 0;
  for (const auto& file : files) {
    std::vector<uint8_t> bytes;
    if (!read_file(file, bytes)) {
      std::fprintf(stderr, "%s: cannot read %s\n", argv[0], file.c_str());
      return 2;
    }
    static const uint8_t kEmpty = 0;  // libFuzzer passes a valid pointer for an empty input too
    LLVMFuzzerTestOneInput(bytes.empty() ? &kEmpty : bytes.data(), bytes.size());
    uint64_t name_hash = 0xCBF29CE484222325ull;
    for (const char c : file.filename().string()) name_hash = (name_hash ^ uint8_t(c)) * 0x100000001B3ull;
    Rng rng{seed ^ name_hash};
    for (long k = 0; k < mutants; ++k) {
      const std::vector<uint8_t> m = mutant(bytes, rng);
      LLVMFuzzerTestOneInput(m.empty() ? &kEmpty : m.data(), m.size());
    }
    runs += 1 + mutants;
  }
  std::printf("%s: %zu seeds, %ld inputs, no finding\n", argv[0], files.size(), runs);
  return 0;
}
