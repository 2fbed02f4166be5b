// A model's parameters as one flat buffer laid out by a list of named slots (TensorSlot), with the
// operations every single-file checkpoint family shares: zero construction, the gated-transformer
// spec's initialisation by tensor name, checked loading and atomic saving. Used by the routed
// families (moe, mod); slots start on 16-element boundaries so that matrix rows stay aligned.
#pragma once
#include "core/json_fields.h"
#include <cstdint>
#include <map>
#include "core/json.h"
#include <string>
#include <vector>

#include "models/base/block.h"  // BlockWeights
#include "models/base/tensor_slot.h"

namespace fca {

class SafetensorsReader;

// Builds a layout: slots in the order added, AdamW decay on rank-2 tensors (the spec's rule).
class LayoutBuilder {
 public:
  void add(std::string name, std::vector<int64_t> shape, bool weight_decay);
  void add(std::string name, std::vector<int64_t> shape) { add(std::move(name), shape, shape.size() == 2); }
  // ln1, attn.qkv, attn.proj and ln2 of block `prefix` ("blocks.{l}."), width D.
  void add_attention_half(const std::string& prefix, int64_t D);
  std::vector<TensorSlot> slots;

 private:
  size_t offset_ = 0;
};

template <typename T>
class ParameterBuffer {
 public:
  ParameterBuffer() = default;
  explicit ParameterBuffer(std::vector<TensorSlot> layout);  // every parameter zero

  const std::vector<TensorSlot>& layout() const { return layout_; }
  T* data() { return storage_.data(); }
  const T* data() const { return storage_.data(); }
  size_t size() const { return storage_.size(); }
  // The tensor named `name`, or null.
  T* find(const std::string& name);
  // Throws Error when absent.
  T* at(const std::string& name);
  // The pointers of a pre-norm block's tensors (models/base/block.h) under `prefix` (absent ones null).
  BlockWeights<T> block(const std::string& prefix);

  // The gated-transformer spec's initialisation from one seed, by name: normal(0, 0.02) for wte,
  // wpe, *qkv.weight, *fc.weight and *router.weight; *proj.weight of the attention, MLP and experts
  // (the residual projections) normal(0, 0.02/sqrt(2L)); LayerNorm weights 1; everything else 0.
  void initialize(int n_layer, uint64_t seed);
  // Reads every slot from `reader` (names, shapes, dtypes checked; extra tensors are an error);
  // `what` names the model in messages ("moe model with 4 layers").
  void load(const SafetensorsReader& reader, const std::string& what);
  // Writes F32 tensors and `metadata` atomically.
  void save(const std::string& path, const std::map<std::string, std::string>& metadata) const;

 private:
  std::vector<TensorSlot> layout_;
  std::vector<T> storage_;
};

// A checkpoint's config object, read strictly: not JSON, not an object, an unknown key, a missing
// field, a non-integer where an integer belongs or an integer outside [0, 2^24] is an Error that
// names `where` and the field.
class StrictConfig {
 public:
  StrictConfig(const std::string& text, const std::string& where, const std::vector<std::string>& known_keys,
               const std::string& format);
  // A required integer in 0 .. 2^24, and a required finite number (ranges beyond that: validate()).
  int integer(const std::string& field) const;
  double number(const std::string& field) const;
  std::string text(const std::string& field) const;
  bool has(const std::string& field) const { return fields_.has(field); }

 private:
  static JsonFields parse(const std::string& text, const std::string& where, const std::vector<std::string>& known,
                          const std::string& format);
  void require(const std::string& field) const;
  std::string where_;
  JsonFields fields_;
};

// The shape fields the transformer families share, bounded so that no product of them overflows
// and a layout stays small: 1 <= n_layer <= 4096, 1 <= d_model <= 65536, 1 <= n_head <= d_model,
// 1 <= seq_len <= 2^20. Throws Error naming the field, the bound and the value.
void check_transformer_shape(int n_layer, int d_model, int n_head, int seq_len, const std::string& where);
// Before a model read from `file` is allocated: the parameters its config implies must fit in the
// file at 2 bytes each (the smallest dtype a checkpoint may use), so that a config cannot make fca
// allocate more than the file's tensors could fill.
void check_parameters_fit(size_t parameters, const std::string& file);

// Throws Error("<where>: <field> must be positive, found <v>") when v <= 0.
void require_positive(int v, const char* field, const std::string& where);

// Parameters of a layout (without the alignment padding).
size_t layout_parameter_count(const std::vector<TensorSlot>& layout);

// The "format" and "config" metadata of a single-file checkpoint; throws Error naming the file
// when either is missing or the format is not `expected`.
std::string read_checkpoint_config(const std::string& path, const std::string& expected_format);
// The "format" metadata of a safetensors file ("" when it has none).
std::string read_checkpoint_format(const std::string& path);

}  // namespace fca
