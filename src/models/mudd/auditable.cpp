#include "models/mudd/auditable.h"

#include <cstdio>
#include <filesystem>

#include <algorithm>

#include "core/error.h"
#include "core/file_io.h"

namespace fca {

MuddAuditable::MuddAuditable(const std::string& dir, int max_batch, int max_tokens)
    : FamilyAuditable(MuddModel<float>::load(dir, /*in_place=*/true), max_batch, max_tokens) {
  const std::string tokenizer_path = dir + "/tokenizer.json";
  if (file_exists(tokenizer_path)) {
    tokenizer_ = std::make_unique<BpeTokenizer>(BpeTokenizer::load(tokenizer_path));
    if (tokenizer_->vocab_size() > model_.config().vocab_size)
      throw Error(tokenizer_path + ": the tokenizer has " + std::to_string(tokenizer_->vocab_size()) +
                  " ids but the model only " + std::to_string(model_.config().vocab_size) + " embedding rows");
  } else if (model_.config().vocab_size < 256) {
    // Without a tokenizer.json the text's bytes are the token ids (the description says "bytes"),
    // which needs an embedding row for every byte.
    throw Error(dir + ": no tokenizer.json, and bytes as token ids need vocab_size >= 256 (found " +
                std::to_string(model_.config().vocab_size) + ")");
  }
}

std::string MuddAuditable::description() const {
  const MuddConfig& c = model_.config();
  return "mudd L " + std::to_string(c.n_layer) + ", D " + std::to_string(c.dim) + ", H " + std::to_string(c.n_head) +
         ", V " + std::to_string(c.vocab_size) + (tokenizer_ ? " (BPE)" : " (bytes)");
}

std::vector<int32_t> MuddAuditable::tokenize(const std::string&, std::span<const unsigned char> text) const {
  if (!tokenizer_) return std::vector<int32_t>(text.begin(), text.end());
  return tokenizer_->encode(std::string(reinterpret_cast<const char*>(text.data()), text.size()));
}

CoefficientTensor MuddAuditable::make_coefficients(int windows, int tokens) const {
  return make_mudd_coefficients(model_.config(), windows, tokens);
}

void MuddAuditable::identity_profile(CoefficientTensor& out) const {
  // A plain transformer: every stream takes the newest source with weight 1.
  const auto& s = out.shape();
  std::fill(out.values().begin(), out.values().begin() + s.per_window(), 0.0f);
  for (int l = 0; l < s.layers; ++l)
    for (int t = 0; t < s.tokens; ++t)
      for (int st = 0; st < s.streams; ++st)
        if (out.valid(l, st, l + 1)) out.at(0, l, t, st, l + 1) = 1.0f;
}

void MuddAuditable::structure_removed_profile(const CoefficientTensor& static_profile, CoefficientTensor& out) const {
  source_uniform_mean(static_profile, out);
}

std::vector<TraceTensor> MuddAuditable::trace_tensors(int B, int T, bool) const {
  const int L = model_.config().n_layer, D = model_.config().dim;
  std::vector<TraceTensor> out{{"final_stream", {B, T, D}, rs_->final_stream()}};
  for (int j = 0; j <= L; ++j) out.push_back({"hidden." + std::to_string(j), {B, T, D}, rs_->hidden[size_t(j)]});
  return out;
}

namespace {

// fca info: the shape, the per-layer FFN and DA widths, the tokenizer.
std::string mudd_info(const std::string& path) {
  const MuddModel<float> model = MuddModel<float>::load(path, /*in_place=*/true);  // full validation
  const MuddConfig& c = model.config();
  std::string out = "model:      ";  // appended piece by piece: g++ 12 warns falsely (-Wrestrict) on " " + string
  out += path;
  out += " (MUDD folder)\n";
  char line[256];
  std::snprintf(line, sizeof line, "shape:      L %d, D %d, H %d (head width %d, rotary %d), vocab %d, positions %d\n", c.n_layer,
                c.dim, c.n_head, c.head_dim, c.rotary_dims(), c.vocab_size, c.block_size);
  out += line;
  out += "FFN widths:";
  for (int i = 0; i < c.n_layer; ++i) out.append(" ").append(std::to_string(c.ffn_width(i)));
  out += "\nDA hidden:  ";
  for (int i = 0; i < c.n_layer; ++i) out.append(" ").append(std::to_string(c.da_hidden(i)));
  out += "\nparameters: " + std::to_string(model.parameter_count()) + "\n";
  out += std::string("tokenizer:  ") + (file_exists(path + "/tokenizer.json") ? "tokenizer.json" : "bytes") + "\n";
  return out + "sha256:     " + model.content_hash() + " (weight files)\n";
}

// fca convert: a folder whose weights are BF16 or F16 (the public checkpoints) into one whose
// weights are F32, once, so that inference can use them in place from the mapped file
// (MuddModel::load in place) instead of upcasting a copy in every process.
std::string mudd_convert(const std::string& path, const std::string& out) {
  const MuddModel<float> model = MuddModel<float>::load(path);  // every tensor upcast into one F32 buffer
  model.save(out, {{"converted_from_sha256", model.content_hash()}});
  const std::string tokenizer = path + "/tokenizer.json";
  if (file_exists(tokenizer)) {
    std::error_code ec;
    std::filesystem::copy_file(tokenizer, out + "/tokenizer.json", std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) throw Error(out + "/tokenizer.json: cannot copy " + tokenizer + " there (" + ec.message() + ")");
  }
  return "F32, " + std::to_string(model.parameter_count()) + " parameters; from " + path + ", sha256 " + model.content_hash();
}

}  // namespace

ModelFamily mudd_model_family() {
  return {"mudd", "a Hugging Face folder (config.json + model.safetensors)",
          [](const std::string& path, const std::string&) { return is_directory(path); },
          [](const std::string& path, int batch, int tokens) -> std::unique_ptr<AuditableModel> {
            return std::make_unique<MuddAuditable>(path, batch, tokens);
          },
          [](const nlohmann::json&) { return std::string("mudd"); },
          mudd_info, mudd_convert};
}

std::vector<std::string> MuddAuditable::source_labels() const {
  std::vector<std::string> labels{"embedding"};
  for (int l = 1; l <= model_.config().n_layer; ++l) labels.push_back("block " + std::to_string(l));
  return labels;
}

}  // namespace fca
