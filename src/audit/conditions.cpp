#include "audit/conditions.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/rng.h"

namespace fca {

std::vector<int> uniform_permutation(Rng& rng, int n) {
  std::vector<int> p(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) p[size_t(i)] = i;
  for (int i = n - 1; i > 0; --i) std::swap(p[size_t(i)], p[size_t(rng.below(uint64_t(i) + 1))]);
  return p;
}

namespace {

int64_t offset(const CoefficientShape& s, int layer, int token, int stream, int source) {
  return ((int64_t(layer) * s.tokens + token) * s.streams + stream) * s.sources + source;
}

// Randomisation streams: distinct first keys keep the conditions' randomness independent.
constexpr uint64_t kDerangementStream = 1, kTokenStream = 2, kLayerStream = 3;

// Copies window `source_window` with each (layer, stream) token axis permuted by sigma (or not).
// A routing record (one stream) moves as a unit: its discrete field follows the same sigma.
void permuted_copy(const CoefficientView& A, int source_window, const AuditRandomness* rand, int r, int target_window,
                   CoefficientTensor& batch, int slot) {
  const CoefficientShape& s = A.shape;
  if (rand == nullptr) {
    batch.copy_window(slot, A, source_window);
    return;
  }
  const float* in = A.window_data(source_window);
  float* out = batch.window_data(slot);
  for (int l = 0; l < s.layers; ++l)
    for (int st = 0; st < s.streams; ++st) {
      const std::vector<int> sigma = rand->token_permutation(r, target_window, l, st);
      for (int t = 0; t < s.tokens; ++t) {  // the whole source vector moves with its token
        std::memcpy(out + offset(s, l, t, st, 0), in + offset(s, l, sigma[size_t(t)], st, 0), sizeof(float) * size_t(s.sources));
        if (s.slots > 0 && st == 0)
          std::memcpy(&batch.discrete_at(slot, l, t, 0),
                      A.window_discrete(source_window) + (int64_t(l) * s.tokens + sigma[size_t(t)]) * s.slots,
                      sizeof(int32_t) * size_t(s.slots));
      }
    }
}

class WindowCondition : public Condition {
 public:
  WindowCondition(std::string name, const CoefficientView& A, const AuditRandomness& rand, bool cross, bool shuffle)
      : name_(std::move(name)), A_(A), rand_(rand), cross_(cross), shuffle_(shuffle) {}
  std::string name() const override { return name_; }
  bool randomized() const override { return cross_ || shuffle_; }
  void coefficients(int window, int r, CoefficientTensor& out, int slot) const override {
    const int source = cross_ ? rand_.derangement(r)[size_t(window)] : window;
    permuted_copy(A_, source, shuffle_ ? &rand_ : nullptr, r, window, out, slot);
  }

 private:
  std::string name_;
  CoefficientView A_;
  const AuditRandomness& rand_;
  bool cross_, shuffle_;
};

class ProfileCondition : public Condition {
 public:
  ProfileCondition(std::string name, const CoefficientTensor& profile) : name_(std::move(name)), profile_(profile) {}
  std::string name() const override { return name_; }
  bool randomized() const override { return false; }
  void coefficients(int, int, CoefficientTensor& out, int slot) const override { out.copy_window(slot, profile_.view(), 0); }

 private:
  std::string name_;
  const CoefficientTensor& profile_;
};

// One group switched off: the cached window, with every entry of the group at its disabled value.
class GroupDisabledCondition : public Condition {
 public:
  GroupDisabledCondition(std::string name, int group, const CoefficientView& A, const DisableGroups& groups)
      : name_(std::move(name)), group_(group), A_(A), groups_(groups) {}
  std::string name() const override { return name_; }
  bool randomized() const override { return false; }
  void coefficients(int window, int, CoefficientTensor& out, int slot) const override {
    out.copy_window(slot, A_, window);
    const CoefficientShape& s = A_.shape;
    float* o = out.window_data(slot);
    const float* disabled = groups_.disabled.window_data(0);
    for (int l = 0; l < s.layers; ++l)
      for (int st = 0; st < s.streams; ++st)
        for (int k = 0; k < s.sources; ++k) {
          if (groups_.group_of[(size_t(l) * s.streams + st) * s.sources + k] != group_) continue;
          for (int t = 0; t < s.tokens; ++t) o[offset(s, l, t, st, k)] = disabled[offset(s, l, t, st, k)];
        }
  }

 private:
  std::string name_;
  int group_;
  CoefficientView A_;  // a view (pointers and shape): kept by value, so a temporary view may be passed
  const DisableGroups& groups_;
};

class LayerPermutationCondition : public Condition {
 public:
  LayerPermutationCondition(const CoefficientTensor& static_profile, const AuditRandomness& rand)
      : S_(static_profile), rand_(rand) {}
  std::string name() const override { return "layer_permutation"; }
  bool randomized() const override { return true; }
  void coefficients(int, int r, CoefficientTensor& batch, int slot) const override {
    float* out = batch.window_data(slot);
    const CoefficientShape& s = S_.shape();
    const std::vector<int> perm = rand_.layer_permutation(r, s.layers);
    const int64_t per_layer = int64_t(s.tokens) * s.streams * s.sources;
    for (int l = 0; l < s.layers; ++l)
      std::memcpy(out + l * per_layer, S_.window_data(0) + perm[size_t(l)] * per_layer, sizeof(float) * size_t(per_layer));
  }

 private:
  const CoefficientTensor& S_;
  const AuditRandomness& rand_;
};

}  // namespace

void compute_means(const CoefficientView& C, CoefficientTensor& layer_position_mean, CoefficientTensor& static_profile) {
  const CoefficientShape& s = C.shape;
  const int64_t per = s.per_window();
  if (C.windows <= 0) throw Error("calibration set is empty");
  std::vector<double> sum(size_t(per), 0.0);
  for (int w = 0; w < C.windows; ++w) {
    const float* a = C.window_data(w);
    for (int64_t j = 0; j < per; ++j) sum[size_t(j)] += a[j];
  }
  float* lpm = layer_position_mean.window_data(0);
  for (int64_t j = 0; j < per; ++j) lpm[j] = float(sum[size_t(j)] / C.windows);
  float* S = static_profile.window_data(0);
  for (int l = 0; l < s.layers; ++l)
    for (int st = 0; st < s.streams; ++st)
      for (int k = 0; k < s.sources; ++k) {
        double total = 0;
        for (int t = 0; t < s.tokens; ++t) total += sum[size_t(offset(s, l, t, st, k))];
        const float v = float(total / (double(C.windows) * s.tokens));
        for (int t = 0; t < s.tokens; ++t) S[offset(s, l, t, st, k)] = v;
      }
}

AuditRandomness::AuditRandomness(uint64_t seed, int windows, int tokens, int reps, bool joint_streams)
    : seed_(seed), windows_(windows), tokens_(tokens), joint_streams_(joint_streams) {
  if (windows < 2) throw Error("cross-input conditions need at least 2 evaluation windows, found " + std::to_string(windows));
  // Every derangement is drawn here, once: derangement() hands out references into a vector that
  // never changes afterwards, so they stay valid and concurrent readers need no lock.
  derangements_.resize(size_t(reps));
  for (int r = 0; r < reps; ++r) {
    Rng rng(derive_seed(seed_, kDerangementStream, uint64_t(r)));
    auto& d = derangements_[size_t(r)];
    for (;;) {  // a uniform permutation, conditioned on having no fixed point, is a uniform derangement
      d = uniform_permutation(rng, windows_);
      bool fixed_point = false;
      for (int i = 0; i < windows_; ++i) fixed_point = fixed_point || d[size_t(i)] == i;
      if (!fixed_point) break;
    }
  }
}

const std::vector<int>& AuditRandomness::derangement(int r) const {
  if (r < 0 || size_t(r) >= derangements_.size())
    throw Error("randomisation " + std::to_string(r) + " asked for; the audit draws " + std::to_string(derangements_.size()));
  return derangements_[size_t(r)];
}

std::vector<int> AuditRandomness::token_permutation(int r, int window, int layer, int stream) const {
  Rng rng(derive_seed(derive_seed(seed_, kTokenStream, uint64_t(r)), uint64_t(window),
                      (uint64_t(layer) << 32) | uint64_t(joint_streams_ ? 0 : stream)));
  return uniform_permutation(rng, tokens_);
}

uint64_t AuditRandomness::stream_seed(uint64_t stream, int r, int window, int layer) const {
  return derive_seed(derive_seed(seed_, stream, uint64_t(r)), uint64_t(window), uint64_t(layer));
}

std::vector<int> AuditRandomness::layer_permutation(int r, int layers) const {
  Rng rng(derive_seed(seed_, kLayerStream, uint64_t(r)));
  return uniform_permutation(rng, layers);
}

const std::vector<std::string>& all_condition_names() {
  static const std::vector<std::string> names{"correct",           "cross_input",     "token_shuffle",
                                              "cross_shuffle",     "layer_position_mean", "static_profile",
                                              "structure_removed", "identity",        "layer_permutation"};
  return names;
}

std::unique_ptr<Condition> make_profile_condition(std::string name, const CoefficientTensor& profile) {
  return std::make_unique<ProfileCondition>(std::move(name), profile);
}

bool layers_are_permutable(const CoefficientView& v) {
  for (int l = 1; l < v.shape.layers; ++l)
    for (int st = 0; st < v.shape.streams; ++st)
      for (int k = 0; k < v.shape.sources; ++k)
        if (v.valid(l, st, k) != v.valid(0, st, k)) return false;
  return true;
}

const DisableGroups& no_disable_groups() {
  static const DisableGroups none;
  return none;
}

std::vector<std::string> DisableGroups::condition_names() const {
  std::vector<std::string> out;
  for (const auto& n : names) out.push_back("disabled_" + n);
  return out;
}

std::unique_ptr<Condition> make_condition(const std::string& name, const CoefficientView& A,
                                          const CalibrationProfiles& p, const AuditRandomness& rand,
                                          const DisableGroups& groups) {
  const std::vector<std::string> disabled = groups.condition_names();
  for (size_t g = 0; g < disabled.size(); ++g)
    if (name == disabled[g]) return std::make_unique<GroupDisabledCondition>(name, int(g), A, groups);
  if (name == "correct") return std::make_unique<WindowCondition>(name, A, rand, false, false);
  if (name == "cross_input") return std::make_unique<WindowCondition>(name, A, rand, true, false);
  if (name == "token_shuffle") return std::make_unique<WindowCondition>(name, A, rand, false, true);
  if (name == "cross_shuffle") return std::make_unique<WindowCondition>(name, A, rand, true, true);
  if (name == "layer_position_mean") return std::make_unique<ProfileCondition>(name, p.layer_position_mean);
  if (name == "static_profile") return std::make_unique<ProfileCondition>(name, p.static_profile);
  if (name == "structure_removed") return std::make_unique<ProfileCondition>(name, p.structure_removed);
  if (name == "identity") return std::make_unique<ProfileCondition>(name, p.identity);
  if (name == "layer_permutation") {
    if (!layers_are_permutable(A))
      throw Error("layer_permutation does not apply: the layers' valid (stream, source) coordinates differ");
    return std::make_unique<LayerPermutationCondition>(p.static_profile, rand);
  }
  std::string known;
  for (const auto& n : all_condition_names()) known += (known.empty() ? "" : ", ") + n;
  for (const auto& n : disabled) known += ", " + n;
  throw Error("unknown condition '" + name + "' (known: " + known + ")");
}

}  // namespace fca
