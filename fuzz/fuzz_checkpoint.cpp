// Any single-file checkpoint through the registry (every single-file family): format dispatch, the config in
// the metadata (ranges, narrowing, allocation bounded by the file), every tensor's name and shape.
#include "fuzz_util.h"
#include "families/families.h"
#include "models/registry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fca::install_families();
  const std::string path = fca::fuzz::work_dir() + "/checkpoint.safetensors";
  fca::fuzz::write_file(path, data, size);
  fca::fuzz::expect_ok_or_error([&] {
    auto model = fca::open_model(path, 2, 64);
    (void)model->description();
  });
  return 0;
}
