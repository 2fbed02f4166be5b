// A data folder whose splits are the input's bytes: opening, window counts, windows, hashes.
#include "data/corpus.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = fca::fuzz::work_dir() + "/data";
  std::filesystem::create_directories(dir);
  const size_t third = size / 3;
  fca::fuzz::write_file(dir + "/train.txt", data, third);
  fca::fuzz::write_file(dir + "/valid.txt", data + third, third);
  fca::fuzz::write_file(dir + "/test.txt", data + 2 * third, size - 2 * third);
  const int T = size > 0 ? 1 + data[0] % 64 : 1;
  fca::fuzz::expect_ok_or_error([&] {
    const fca::Corpus corpus(dir);
    for (const char* name : {"train", "valid", "test"}) {
      const fca::TextSplit& s = corpus.split(name);
      (void)s.content_hash();
      const int64_t n = s.window_count(T);
      std::vector<int32_t> in(static_cast<size_t>(T)), out(static_cast<size_t>(T));
      for (int64_t i : fca::evenly_spaced_windows(n, std::min<int64_t>(n, 4), name)) s.window(i, T, in.data(), out.data());
    }
  });
  return 0;
}
