// 16-bit floating-point formats as PyTorch and safetensors hold them: IEEE binary16 (F16) and
// bfloat16 (BF16). Widening is exact; narrowing rounds to nearest, ties to even, as PyTorch's
// `tensor.to(torch.float16 / torch.bfloat16)` does on CPU (NaN stays NaN, overflow gives inf), so
// fca can compute bit for bit what a 16-bit module receives when it is handed float32 values.
#pragma once
#include <cstdint>

namespace fca {

float bf16_to_f32(uint16_t bits);
float f16_to_f32(uint16_t bits);
uint16_t f32_to_bf16(float value);
uint16_t f32_to_f16(float value);

// A float32 value as a module of format `bf16` / `f16` holds it, widened back to float32.
inline float round_through_bf16(float value) { return bf16_to_f32(f32_to_bf16(value)); }
inline float round_through_f16(float value) { return f16_to_f32(f32_to_f16(value)); }

}  // namespace fca
