// The safetensors reader on arbitrary bytes: header, offsets, dtypes, shapes (overflow), reads.
#include "core/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fca::fuzz::expect_ok_or_error([&] {
    const fca::SafetensorsReader r(std::string(reinterpret_cast<const char*>(data), size), "input");
    for (const auto& [name, t] : r.tensors()) {
      if (t.numel() > (1 << 16)) continue;
      (void)r.read_as_double(name);
      if (t.dtype != fca::DType::I32 && t.dtype != fca::DType::I64 && t.dtype != fca::DType::U8) {
        std::vector<float> out(size_t(t.numel()));
        r.read_into<float>(name, t.shape, out.data());
      }
    }
  });
  return 0;
}
