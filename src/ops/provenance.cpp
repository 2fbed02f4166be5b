#include "ops/provenance.h"

#include <unistd.h>

#include <ctime>
#include <fstream>

#include "core/threads.h"
#include "ops/gemm.h"
#include "ops/onednn_matmul.h"
#include "ops/simd.h"
#include "fca/version.h"

namespace fca {
namespace {
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return "unknown";
}
}  // namespace

std::string build_description() {
  std::string isa;
#if defined(__x86_64__)
  isa = "x86-64";
#elif defined(__aarch64__)
  isa = "aarch64";
#else
  isa = "other";
#endif
#ifdef __SSE4_2__
  isa += " sse4.2";
#endif
#ifdef __AVX__
  isa += " avx";
#endif
#ifdef __AVX2__
  isa += " avx2";
#endif
#ifdef __FMA__
  isa += " fma";
#endif
#ifdef __AVX512F__
  isa += " avx512f";
#endif
  // The SIMD target the kernels dispatch to on this machine decides their speed, not their bits
  // (ops/simd.h); it is recorded so that a reader knows which code ran.
  // The GEMMs: oneDNN's or fca's kernel for float (by shape), OpenBLAS (its kernels chosen at run
  // time) for double.
  return std::string("g++ ") + __VERSION__ + "; " + isa + "; " + FCA_BUILD_FLAGS + "; simd " + simd::dispatched_target() +
         "; " + blas_description();
}

std::string fca_version_string() { return std::string("fca ") + FCA_VERSION + " (commit " + FCA_GIT_COMMIT + ")"; }

nlohmann::ordered_json provenance_base() {
  nlohmann::ordered_json p;
  p["fca_version"] = FCA_VERSION;
  p["git_commit"] = FCA_GIT_COMMIT;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  p["machine"] = {{"host", host}, {"cpu", cpu_model()}, {"logical_cpus", sysconf(_SC_NPROCESSORS_ONLN)}};
  p["threads"] = thread_count();
  p["build"] = build_description();
  // The matrix products' precision (ops/onednn_matmul.h): bf16 results differ from fp32's.
  p["precision"] = matmul_precision_name(matmul_precision());
  const std::time_t now = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  p["created_utc"] = when;
  return p;
}

}  // namespace fca
