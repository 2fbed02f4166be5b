// Threading: OpenMP for our kernels and the OpenMP build of OpenBLAS for GEMM, one thread count for
// both. Kernels split work into fixed chunks by index so that results depend only on the thread
// count, never on scheduling.
#pragma once

namespace fca {

// Sets the thread count for OpenMP regions and OpenBLAS. n <= 0 means "all cores".
void set_threads(int n);
int thread_count();

}  // namespace fca
