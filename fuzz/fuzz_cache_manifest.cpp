// The coefficient cache's manifest (JSON in the cache's metadata) and a whole cache file.
#include "core/json.h"

#include "audit/cache.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (!j.is_discarded())
    fca::fuzz::expect_ok_or_error([&] {
      const fca::CacheManifest m = fca::CacheManifest::from_json(j, "input");
      // A cache file whose manifest is this one: opened against itself.
      (void)m.to_json();
    });
  const std::string path = fca::fuzz::work_dir() + "/cache.safetensors";
  fca::fuzz::write_file(path, data, size);
  fca::fuzz::expect_ok_or_error([&] {
    const fca::SafetensorsReader r(path);
    const auto it = r.metadata().find("manifest");
    if (it == r.metadata().end()) return;
    const auto mj = nlohmann::json::parse(it->second, nullptr, false);
    if (mj.is_discarded()) return;
    const fca::CacheManifest expected = fca::CacheManifest::from_json(mj, path);
    const fca::CoefficientCache cache(path, expected);
    (void)cache.evaluation();
  });
  return 0;
}
