#include "core/provenance.h"

#include <unistd.h>

#include <ctime>
#include <fstream>

#include "core/threads.h"
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

std::string fca_version_string() { return std::string("fca ") + FCA_VERSION + " (commit " + FCA_GIT_COMMIT + ")"; }

nlohmann::ordered_json provenance_base() {
  nlohmann::ordered_json p;
  p["fca_version"] = FCA_VERSION;
  p["git_commit"] = FCA_GIT_COMMIT;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  p["machine"] = {{"host", host}, {"cpu", cpu_model()}, {"logical_cpus", sysconf(_SC_NPROCESSORS_ONLN)}};
  p["threads"] = thread_count();
  const std::time_t now = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  p["created_utc"] = when;
  return p;
}

}  // namespace fca
