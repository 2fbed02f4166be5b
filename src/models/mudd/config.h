// MUDD models (MUDDFormer dynamic dense connections on a Pythia trunk; docs/mudd.md):
// the configuration read from a Hugging Face folder's config.json, and the derived per-layer widths.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fca {

struct MuddConfig {
  int n_layer = 0;            // L (>= 2)
  int dim = 0;                // D
  int n_head = 0;             // H (n_local_heads must equal it: no grouped-query attention)
  int head_dim = 0;           // dh = D / H
  int vocab_size = 0;         // V (embedding and head rows)
  int block_size = 0;         // maximum positions (RoPE table size)
  int intermediate_size = 0;  // base FFN width I, re-allocated per layer
  double rope_base = 10000;
  double rotary_pct = 0.25;
  double norm_eps = 1e-5;
  bool expand_last = true;    // the last DA's base hidden width x 4
  bool round64 = true;        // DA hidden width (base // 64 + 1) * 64

  int rotary_dims() const { return int(head_dim * rotary_pct); }
  // Streams made by DA module i: 4 (Q, K, V, R) before the last block, 1 after it.
  int streams(int i) const { return i < n_layer - 1 ? 4 : 1; }
  int sources(int i) const { return i + 2; }  // X_0 .. X_{i+1}
  // FFN width of block i: round(I (i/(L-1) + 0.5) / 128) * 128, Python's round (half to even).
  int ffn_width(int i) const;
  // DA hidden width of module i.
  int da_hidden(int i) const;

  // Reads and validates <dir>/config.json: every key the architecture depends on must be present
  // (never class defaults); unsupported settings are errors naming the key.
  static MuddConfig load(const std::string& dir);
  // The config.json written for models trained here (same keys as the public checkpoints).
  std::string to_json() const;
  bool operator==(const MuddConfig&) const = default;
};

}  // namespace fca
