// A model's parameters as one flat buffer laid out by a list of named slots (TensorSlot), with the
// operations every family shares: zero construction, the gated family's initialisation (docs/model.md) by
// tensor name, checked loading (one file, or shards with tensors used in place) and atomic saving.
// The one parameter store of every family (FlatModel's gated, moe and mod; MuddModel); slots start
// on 16-element boundaries so that matrix rows stay aligned.
#pragma once
#include "core/json_fields.h"
#include <cstdint>
#include <map>
#include <memory>
#include "core/json.h"
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "models/base/block.h"  // BlockWeights
#include "models/base/stream.h"  // kByteVocab
#include "models/base/tensor_slot.h"

namespace fca {

// "blocks.{l}.": the prefix of block l's tensors in every family.
std::string block_prefix(int layer);

// The trunk's tensors of LayoutBuilder::add_byte_trunk bound into a family's weights struct (its
// members wte, wpe, ln_f_weight, ln_f_bias), each looked up by name with `at` (name -> T*).
template <typename Weights, typename At>
void bind_byte_trunk(Weights& w, At at) {
  w.wte = at("wte");
  w.wpe = at("wpe");
  w.ln_f_weight = at("ln_f.weight");
  w.ln_f_bias = at("ln_f.bias");
}

// Builds a layout: slots in the order added, AdamW decay on rank-2 tensors (docs/model.md).
class LayoutBuilder {
 public:
  void add(std::string name, std::vector<int64_t> shape, bool weight_decay);
  void add(std::string name, std::vector<int64_t> shape) { add(std::move(name), shape, shape.size() == 2); }
  // ln1, attn.qkv, attn.proj and ln2 of block `prefix` ("blocks.{l}."), width D.
  void add_attention_half(const std::string& prefix, int64_t D);
  // The attention half and the dense MLP (mlp.fc [4D, D], mlp.proj [D, 4D] and their biases): the
  // gated family's Dense block, in its order.
  void add_dense_block(const std::string& prefix, int64_t D);
  // The byte-level trunk every pre-norm family shares, in one order: wte [256, D], wpe [positions,
  // D], each block's tensors, block(*this, block_prefix(l), l) for l < layers, then ln_f.weight and
  // ln_f.bias [D]. A family adds its own tensors after it (gates, classifiers, hyper-connections).
  template <typename Block>
  void add_byte_trunk(int layers, int64_t D, int64_t positions, Block block) {
    add("wte", {kByteVocab, D});
    add("wpe", {positions, D});
    for (int l = 0; l < layers; ++l) block(*this, block_prefix(l), l);
    add("ln_f.weight", {D});
    add("ln_f.bias", {D});
  }
  std::vector<TensorSlot> slots;

 private:
  size_t offset_ = 0;
};

// The values of every slot, each at its own pointer: in the buffer's own storage (slot i at its
// layout offset), or, for a buffer loaded in place, some of them in the pages of memory-mapped
// checkpoint files (read-only: for inference; processes on one node share the pages).
template <typename T>
class ParameterBuffer {
 public:
  ParameterBuffer() = default;
  explicit ParameterBuffer(std::vector<TensorSlot> layout);  // every parameter zero
  // A copy owns all its values: copying a buffer loaded in place reads the mapped values into the
  // copy's own storage, laid out by the layout.
  ParameterBuffer(const ParameterBuffer& other);
  ParameterBuffer& operator=(const ParameterBuffer& other);
  // Moves hand over the storage (a moved std::vector keeps its address) and the mapped files, so
  // the slot pointers stay valid.
  ParameterBuffer(ParameterBuffer&&) noexcept = default;
  ParameterBuffer& operator=(ParameterBuffer&&) noexcept = default;

  const std::vector<TensorSlot>& layout() const { return layout_; }
  // The buffer's own storage: every slot at its layout offset, except in a buffer loaded in place (from_files),
  // when it holds only the slots that are not mapped (then data() is not laid out by the layout).
  T* data() { return storage_.data(); }
  const T* data() const { return storage_.data(); }
  size_t size() const { return storage_.size(); }
  // Slot i's values, wherever they lie.
  T* slot(size_t i) { return slots_[i]; }
  const T* slot(size_t i) const { return slots_[i]; }
  // True when some slots are the pages of mapped files.
  bool mapped() const { return !mappings_.empty(); }
  // The tensor named `name`, or null.
  T* find(const std::string& name);
  // Throws Error when absent.
  T* at(const std::string& name);
  // The pointers of a pre-norm block's tensors (models/base/block.h) under `prefix` (absent ones null).
  BlockWeights<T> block(const std::string& prefix);

  // The gated family's initialisation (docs/model.md) from one seed, by name: normal(0, 0.02) for wte,
  // wpe, *qkv.weight, *fc.weight and *router.weight; *proj.weight of the attention, MLP and experts
  // (the residual projections) normal(0, 0.02/sqrt(2L)); LayerNorm weights 1; everything else 0.
  void initialize(int n_layer, uint64_t seed);
  // Reads every slot from `reader` (names, shapes, dtypes checked; extra tensors are an error);
  // `what` names the model in messages ("moe model with 4 layers").
  void load(const SafetensorsReader& reader, const std::string& what);
  // A buffer whose slot i is read from files[file_of[i]], whose caller has checked that every slot's tensor is there
  // with its shape (sharded checkpoints). With in_place (float only), an F32 tensor lying 4-byte
  // aligned in its mapped file is used there, not copied; the own storage then holds only the
  // others (upcast), and the buffer keeps the files open as long as it uses their pages.
  // Nothing is allocated before the files are read.
  static ParameterBuffer from_files(std::vector<TensorSlot> layout, std::vector<std::unique_ptr<SafetensorsReader>> files,
                                    const std::vector<size_t>& file_of, bool in_place);
  // Writes F32 tensors and `metadata` atomically (float values from where they lie, no copy).
  void save(const std::string& path, const std::map<std::string, std::string>& metadata) const;

 private:
  void point_slots_at_storage();  // slot i at storage_ + layout_[i].offset
  void fill_from(std::vector<std::unique_ptr<SafetensorsReader>> files, const std::vector<size_t>& file_of, bool in_place);
  std::vector<TensorSlot> layout_;
  std::vector<T> storage_;
  std::vector<T*> slots_;
  std::vector<std::unique_ptr<SafetensorsReader>> mappings_;  // the files whose pages slots use
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
  bool flag(const std::string& field) const;  // a required true or false
  bool has(const std::string& field) const { return fields_.has(field); }

 private:
  static JsonFields parse(const std::string& text, const std::string& where, const std::vector<std::string>& known,
                          const std::string& format);
  void require(const std::string& field) const;
  std::string where_;
  JsonFields fields_;
};

// The shape fields of every pre-norm family's config (n_layer, d_model, n_head, seq_len): written
// first into its JSON, and read from its StrictConfig.
template <typename Config>
void write_shape_fields(nlohmann::ordered_json& j, const Config& c) {
  j["n_layer"] = c.n_layer;
  j["d_model"] = c.d_model;
  j["n_head"] = c.n_head;
  j["seq_len"] = c.seq_len;
}
template <typename Config>
void read_shape_fields(const StrictConfig& j, Config& c) {
  c.n_layer = j.integer("n_layer");
  c.d_model = j.integer("d_model");
  c.n_head = j.integer("n_head");
  c.seq_len = j.integer("seq_len");
}

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
