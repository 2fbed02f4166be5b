// A sharded MUDD folder's model.safetensors.index.json next to the tiny sharded test checkpoint's
// config.json and shards: shard names (which must stay inside the folder), the weight map. Only the
// index is read (mudd_weight_files, the part of MuddModel::load the index feeds): loading and hashing
// the shards on every execution ran at 240 executions/s; the shards themselves are fuzzed by
// fuzz_safetensors.
#include "fuzz_util.h"
#include "models/mudd/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    const std::string d = fca::fuzz::work_dir() + "/mudd-index";
    std::filesystem::create_directories(d);
    for (const auto& entry : std::filesystem::directory_iterator(std::string(FCA_TESTDATA) + "/muddpythia-tiny-sharded"))
      if (entry.path().filename() != "model.safetensors.index.json")
        std::filesystem::copy_file(entry.path(), d + "/" + entry.path().filename().string(),
                                   std::filesystem::copy_options::overwrite_existing);
    return d;
  }();
  fca::fuzz::write_file(dir + "/model.safetensors.index.json", data, size);
  fca::fuzz::expect_ok_or_error([&] { (void)fca::mudd_weight_files(dir); });
  return 0;
}
