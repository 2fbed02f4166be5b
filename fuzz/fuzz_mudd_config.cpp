// A MUDD folder's config.json: keys, types, ranges, derived widths.
#include "fuzz_util.h"
#include "models/mudd/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = fca::fuzz::work_dir() + "/mudd-config";
  std::filesystem::create_directories(dir);
  fca::fuzz::write_file(dir + "/config.json", data, size);
  fca::fuzz::expect_ok_or_error([&] { (void)fca::MuddConfig::load(dir); });
  return 0;
}
