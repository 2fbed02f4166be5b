#include "audit/work_split.h"

#include <cstring>

#include "core/error.h"

namespace fca {

bool run_units(const Communicator& comm, const std::vector<int>& units, const std::function<std::string(int)>& compute,
               const std::function<bool(int, std::string&)>& consume) {
  const size_t N = size_t(comm.size()), r = size_t(comm.rank());
  for (size_t first = 0; first < units.size(); first += N) {
    const size_t in_round = std::min(N, units.size() - first);
    std::string mine = r < in_round ? compute(units[first + r]) : std::string();
    std::vector<std::string> results = comm.gather(std::move(mine));
    bool keep_going = true;
    if (comm.root())
      for (size_t k = 0; k < in_round && keep_going; ++k) keep_going = consume(units[first + k], results[k]);
    std::string go(1, keep_going ? '1' : '0');
    comm.broadcast(go);
    if (go[0] != '1') return false;
  }
  return true;
}

std::vector<int> batch_starts(int W, int batch) {
  if (batch <= 0) throw Error("batch_starts: batch must be positive, found " + std::to_string(batch));
  std::vector<int> starts;
  for (int w0 = 0; w0 < W; w0 += batch) starts.push_back(w0);
  return starts;
}

std::string encode_ints(const std::vector<int>& values) {
  std::string bytes(values.size() * sizeof(int), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::vector<int> decode_ints(const std::string& bytes) {
  if (bytes.size() % sizeof(int) != 0) throw Error("decode_ints: " + std::to_string(bytes.size()) + " bytes is not a list of ints");
  std::vector<int> values(bytes.size() / sizeof(int));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

}  // namespace fca
