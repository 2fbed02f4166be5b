// The configurations `fca exec` times, gathered from every model before any is timed, so that all of
// them are timed together in interleaved rounds (exec/timing.h). A family's measurement runs each
// configuration's counted pass and its NLL at once, and hands over the pass to time; the pass owns
// (shares) the model, run state and coefficient source it needs. A model that runs in another
// process (an external adapter) times its own pass there: it hands over a measurement that returns
// the seconds that process measured.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "exec/timing.h"

namespace fca {

struct TimedMode {
  size_t model = 0;    // index in exec.json's "models"
  std::string list;    // "modes" or "skip_sweep"
  size_t index = 0;    // entry in that list
  std::function<void()> pass;           // timed here (time_once); empty when self_timed is set
  std::function<double()> self_timed;   // runs the pass once elsewhere and returns its seconds
  // Seconds of one run: the pass timed here, or the seconds the self-timed measurement returns.
  double measure() const { return self_timed ? self_timed() : time_once(pass); }
};

// A latency comparison within one model, both entries in "modes": a routed model's savings, an
// external model's live mode against its reference.
struct SavingPair {
  size_t model = 0, mode = 0, against = 0;
};

// A shared T that also keeps `owner` alive until it is destroyed: a replayed source and the tensor
// it reads, handed to a timed pass together.
template <typename T, typename Owner, typename... Args>
std::shared_ptr<T> make_shared_owning(std::shared_ptr<Owner> owner, Args&&... args) {
  return std::shared_ptr<T>(new T(std::forward<Args>(args)...), [owner](T* p) { delete p; });
}

class TimedModes {
 public:
  // Every add() and add_saving() until the next call belongs to models[model].
  void start_model(size_t model) { model_ = model; }
  void add(std::string list, size_t index, std::function<void()> pass) {
    modes_.push_back({model_, std::move(list), index, std::move(pass), {}});
  }
  void add_self_timed(std::string list, size_t index, std::function<double()> measurement) {
    modes_.push_back({model_, std::move(list), index, {}, std::move(measurement)});
  }
  void add_saving(size_t mode, size_t against) { savings_.push_back({model_, mode, against}); }
  const std::vector<TimedMode>& modes() const { return modes_; }
  const std::vector<SavingPair>& savings() const { return savings_; }
  // The index of a timed entry in modes(), or -1.
  long find(size_t model, const std::string& list, size_t index) const {
    for (size_t i = 0; i < modes_.size(); ++i)
      if (modes_[i].model == model && modes_[i].list == list && modes_[i].index == index) return long(i);
    return -1;
  }

 private:
  size_t model_ = 0;
  std::vector<TimedMode> modes_;
  std::vector<SavingPair> savings_;
};

}  // namespace fca
