// tokenizer.json: the settings it may hold, the vocab and merges, added tokens; then an encode.
#include "fuzz_util.h"
#include "models/mudd/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fca::fuzz::work_dir() + "/tokenizer.json";
  fca::fuzz::write_file(path, data, size);
  fca::fuzz::expect_ok_or_error([&] {
    const fca::BpeTokenizer t = fca::BpeTokenizer::load(path);
    const auto ids = t.encode("Hello, world!  It's 2026:\\n\\tcaf\xc3\xa9  naive   spaces");
    (void)t.decode(ids);
  });
  return 0;
}
