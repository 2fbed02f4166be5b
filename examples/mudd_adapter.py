#!/usr/bin/env python3
"""MUDDPythia in plain PyTorch (fp32, CPU), served to fca as an external model.

The model is written from docs/mudd.md's definition: a Pythia parallel-residual trunk with QK-RMSNorm,
partial NeoX RoPE and per-layer FFN widths, plus a MUDD dynamic dense connection (DA module i) after
every block i that mixes all kept hidden states X_0..X_{i+1} into the Q, K, V and R streams of block i+1
(one output stream after the last block). The DA generator (RMSNorm -> W1 -> GELU -> W2 -> +dense_bs)
is the "controller" the audit freezes: its post-bias output alpha is what fca caches and replays.

Numerics follow the fp32 reference ("mode F", tests/data/README.md): weights upcast to fp32
(BF16 files are exact), RoPE cos/sin tables rounded to fp16, masked score -65504, exact erf GELU,
eps = norm_eps (1e-5) for every norm, mixing summed sequentially over sources j = 0..i+1.

Usage (a Hugging Face layout folder: config.json + model.safetensors, or a sharded
model.safetensors.index.json; byte-level models only, vocab >= 256, ids are the raw bytes):

    fca audit --external "python3 examples/mudd_adapter.py --model /path/folder" --data ... --out ...

Options: --model FOLDER, --threads N (torch CPU threads, default 2). The interpreter must have torch
(on Debian: /usr/bin/python3 with python3-torch). Without fca the model is usable on its own:

    model = MuddPythia.from_pretrained(folder)
    logits, alpha = model.forward(ids)          # live: alpha [B, L, T, 4, L+1] is recorded
    logits2, _ = model.forward(ids, alpha)      # replay: generator never runs, logits2 == logits
"""

import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fca_adapter  # noqa: E402  (python/fca_adapter: numpy and torch only)
from fca_torch.mudd import weight_files  # noqa: E402  (a folder's shards, else model.safetensors)

MASKED_SCORE = -65504.0  # fp16 minimum, the reference's causal-mask fill value


# ------------------------------------------------------------------------------------------------
# The model. Weights: fca_adapter.read_safetensors_file (F32 / BF16 / F16 as float32) over the files
# weight_files names (a single file, or the shards of an index).

class MuddPythia:
    """MUDDPythia forward pass. Shapes: B batch, T tokens, D width, H heads, dh head dim,
    L layers, C_i streams of DA i (4, or 1 for the last), S_i = i+2 sources of DA i."""

    def __init__(self, config, weights):
        c = config
        if c.get("dense_type", "qkvr") != "qkvr" or not c.get("dynamic_dense", True) or not c.get("dense", True):
            raise ValueError("only dense_type 'qkvr' with dynamic dense connections is supported")
        if not (c.get("use_qk_norm", True) and c.get("use_parallel_residual", True) and c.get("sepln", True)):
            raise ValueError("only use_qk_norm, use_parallel_residual and sepln = true are supported")
        self.config, self.w = config, weights
        self.L, self.D, self.H = c["n_layer"], c["dim"], c["n_head"]
        self.dh = self.D // self.H
        self.V, self.block_size, self.eps = c["vocab_size"], c["block_size"], c["norm_eps"]
        self.rot = int(self.dh * c["rotary_pct"])          # rotary dims per head (even)
        self.C = [4] * (self.L - 1) + [1]                    # streams of DA module i
        self.controller_calls = 0                            # DA-generator evaluations so far
        self.on_controller = None                            # optional callback per evaluation
        self._check_shapes()
        # RoPE tables [block_size, rot/2]: fp32 angles, cos/sin rounded to fp16, used as fp32.
        half = self.rot // 2
        inv_freq = 1.0 / (c["rope_base"] ** (torch.arange(0, self.rot, 2)[:half].float() / self.rot))
        theta = torch.outer(torch.arange(self.block_size).float(), inv_freq)
        self.cos = torch.cos(theta).half().float()
        self.sin = torch.sin(theta).half().float()

    @classmethod
    def from_pretrained(cls, folder):
        with open(os.path.join(folder, "config.json")) as f:
            config = json.load(f)
        weights = {}
        for path in weight_files(folder):
            weights.update(fca_adapter.read_safetensors_file(path)[0])
        model = cls(config, weights)
        model.files = weight_files(folder)
        return model

    def _check_shapes(self):
        """Fail hard on a missing or misshapen tensor (dense_bs.* in particular: docs/mudd.md, Architecture)."""
        c, L, D = self.config, self.L, self.D
        def need(name, shape):
            if name not in self.w:
                raise KeyError(f"checkpoint lacks tensor {name}")
            if list(self.w[name].shape) != list(shape):
                raise ValueError(f"{name}: shape {list(self.w[name].shape)}, expected {list(shape)}")
        need("tok_embeddings.weight", [self.V, D]); need("output.weight", [self.V, D])
        need("norm.weight", [D]); need("norm.bias", [D])
        for i in range(L):
            p = f"layers.{i}."
            ffn = round(c["intermediate_size"] * (i / max(L - 1, 1) + 0.5) / 128) * 128  # docs/mudd.md, Architecture
            norms = ["attention_norm"] if i == 0 else [f"attention_norms.{k}" for k in range(3)]
            for norm in norms + ["ffn_norm"]:
                need(p + norm + ".weight", [D]); need(p + norm + ".bias", [D])
            for proj in ("wq", "wk", "wv", "wo"):
                need(p + f"attention.{proj}.weight", [D, D]); need(p + f"attention.{proj}.bias", [D])
            need(p + "attention.q_norm.weight", [self.dh]); need(p + "attention.k_norm.weight", [self.dh])
            need(p + "feed_forward.w1.weight", [ffn, D]); need(p + "feed_forward.w1.bias", [ffn])
            need(p + "feed_forward.w2.weight", [D, ffn]); need(p + "feed_forward.w2.bias", [D])
            out = self.C[i] * (i + 2)
            base = out * (4 if i == L - 1 and c.get("expand_last", False) else 1)
            hidden = (base // 64 + 1) * 64 if c.get("round64", False) else base   # round64 always adds 64
            need(f"dense_bs.{i}", [self.C[i], i + 2])
            need(f"dynamic_dense.{i}.w1.weight", [hidden, D]); need(f"dynamic_dense.{i}.w2.weight", [out, hidden])

    def parameter_count(self):
        return sum(t.numel() for t in self.w.values())

    # --- building blocks -------------------------------------------------------------------------

    def _ln(self, x, name):                       # LayerNorm over D with weight and bias
        return F.layer_norm(x, (self.D,), self.w[name + ".weight"], self.w[name + ".bias"], self.eps)

    def _rms(self, x):                            # RMS normalisation over the last dim, no scale
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def _rope(self, x):
        """x [B, T, H, dh]: NeoX rotate-half RoPE on dims 0..rot-1 (dim m pairs with m + rot/2).
        The rotated pairs are written interleaved, [y_0, y'_h, y_1, y'_{h+1}, ...], as the reference
        does (docs/mudd.md, Architecture): q and k share the permutation, so q.k is the same sum, but its terms are
        then added in the reference's order, which makes the scores bit-identical to it."""
        T, half = x.shape[1], self.rot // 2
        cos, sin = self.cos[:T, None, :], self.sin[:T, None, :]          # [T, 1, rot/2]
        x1, x2, rest = x[..., :half], x[..., half:self.rot], x[..., self.rot:]
        pairs = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)   # [B, T, H, rot/2, 2]
        return torch.cat([pairs.flatten(-2), rest], dim=-1)

    def _attention(self, i, q_in, k_in, v_in):    # inputs already normalised, [B, T, D] -> [B, T, D]
        p, (B, T, _) = f"layers.{i}.attention.", q_in.shape
        def heads(x, proj, norm):                 # projection -> [B, T, H, dh] -> QK-norm -> RoPE
            x = F.linear(x, self.w[p + proj + ".weight"], self.w[p + proj + ".bias"]).view(B, T, self.H, self.dh)
            return x if norm is None else self._rope(self._rms(x) * self.w[p + norm + ".weight"])
        q = heads(q_in, "wq", "q_norm").transpose(1, 2)                  # [B, H, T, dh]
        k = heads(k_in, "wk", "k_norm").transpose(1, 2)
        v = heads(v_in, "wv", None).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.dh))   # [B, H, T, T]
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, MASKED_SCORE)
        y = torch.matmul(torch.softmax(scores, dim=-1), v)                # [B, H, T, dh]
        y = y.transpose(1, 2).reshape(B, T, self.D)                       # heads concatenated
        return F.linear(y, self.w[p + "wo.weight"], self.w[p + "wo.bias"])

    def _block(self, i, q_s, k_s, v_s, r_s):      # streams [B, T, D] -> X_{i+1} [B, T, D]
        p = f"layers.{i}."
        if i == 0:                                # block 0: one input LN shared by q, k and v
            a = self._ln(r_s, p + "attention_norm")
            attn = self._attention(i, a, a, a)
        else:                                     # blocks >= 1: one LN per Q/K/V stream
            attn = self._attention(i, self._ln(q_s, p + "attention_norms.0"),
                                   self._ln(k_s, p + "attention_norms.1"), self._ln(v_s, p + "attention_norms.2"))
        h = F.gelu(F.linear(self._ln(r_s, p + "ffn_norm"), self.w[p + "feed_forward.w1.weight"],
                            self.w[p + "feed_forward.w1.bias"]))
        ffn = F.linear(h, self.w[p + "feed_forward.w2.weight"], self.w[p + "feed_forward.w2.bias"])
        return (r_s + attn) + ffn                 # parallel residual on the R stream, this order

    def generate_alpha(self, i, x):
        """DA generator i (the controller): x = X_{i+1} [B, T, D] -> post-bias alpha [B, T, C_i, i+2].
        Flat generator output index c*(i+2)+j is stream c, source j (stream-major)."""
        self.controller_calls += 1
        if self.on_controller is not None:
            self.on_controller()
        p = f"dynamic_dense.{i}."
        h = F.gelu(F.linear(self._rms(x), self.w[p + "w1.weight"]))                  # [B, T, H_i]
        dyn = F.linear(h, self.w[p + "w2.weight"])                                    # [B, T, C_i*(i+2)]
        return dyn.view(*x.shape[:2], self.C[i], i + 2) + self.w[f"dense_bs.{i}"]     # + beta [C_i, i+2]

    def coefficient_mask(self):
        """bool [L, 4, L+1]: stream c < C_i and source j <= i+1 are valid."""
        mask = torch.zeros(self.L, 4, self.L + 1, dtype=torch.bool)
        for i in range(self.L):
            mask[i, :self.C[i], :i + 2] = True
        return mask

    def identity_coefficients(self):
        """float32 [L, 4, L+1]: one-hot on the newest source j = i+1 (a plain transformer)."""
        ident = torch.zeros(self.L, 4, self.L + 1)
        for i in range(self.L):
            ident[i, :self.C[i], i + 1] = 1.0
        return ident

    # --- the whole model -------------------------------------------------------------------------

    @torch.inference_mode()
    def forward(self, ids, alpha=None):
        """ids int64 [B, T]; alpha None (live) or float32 [B, L, T, 4, L+1] (replay).
        Returns (logits float32 [B, T, V], alpha float32 [B, L, T, 4, L+1]).
        Live: generator i writes its alpha into the padded tensor (invalid entries stay 0).
        Replay: the given tensor is used and no generator runs. In both modes the mixing reads
        alpha from that same padded tensor, so the arithmetic is identical and replaying a
        recorded alpha reproduces the live logits bit for bit."""
        B, T = ids.shape
        if T > self.block_size:
            raise ValueError(f"{T} tokens exceed block_size {self.block_size} (the RoPE table)")
        if int(ids.min()) < 0 or int(ids.max()) >= self.V:
            raise ValueError(f"token ids must lie in [0, {self.V})")
        live = alpha is None
        if live:
            alpha = torch.zeros(B, self.L, T, 4, self.L + 1, dtype=torch.float32)
        else:
            if tuple(alpha.shape) != (B, self.L, T, 4, self.L + 1):
                raise ValueError(f"alpha shape {list(alpha.shape)}, expected {[B, self.L, T, 4, self.L + 1]}")
            alpha = alpha.to(torch.float32)       # a no-op for a recorded (float32) tensor
        X = [F.embedding(ids, self.w["tok_embeddings.weight"])]           # sources X_0.., each [B, T, D]
        streams = [X[0]] * 4                                              # block 0 reads X_0 everywhere
        for i in range(self.L):
            X.append(self._block(i, *streams))                           # X_{i+1}
            if live:
                alpha[:, i, :, :self.C[i], :i + 2] = self.generate_alpha(i, X[-1])
            a = alpha[:, i]                                               # [B, T, 4, L+1]
            streams = []
            for c in range(self.C[i]):                                    # Y_i^c = sum_j a[c, j] X_j
                y = a[:, :, c, 0, None] * X[0]
                for j in range(1, i + 2):
                    y = y + a[:, :, c, j, None] * X[j]
                streams.append(y)
        logits = F.linear(self._ln(streams[0], "norm"), self.w["output.weight"])      # [B, T, V]
        return logits, alpha


# ------------------------------------------------------------------------------------------------
# The fca adapter.

class MuddAdapter(fca_adapter.Adapter):
    """Serves MuddPythia to `fca audit --external`: coefficients [B, L, T, 4, L+1]."""

    def __init__(self, folder):
        super().__init__()
        if os.path.exists(os.path.join(folder, "tokenizer.json")):
            raise ValueError(f"{folder} has a tokenizer.json: this example is byte-level (token id = byte). "
                             "A BPE model needs a tokenize() implementation and describe(tokenizer='ids').")
        self.folder = folder
        self.model = MuddPythia.from_pretrained(folder)
        if self.model.V < 256:
            raise ValueError(f"vocab {self.model.V} < 256: byte-level input needs every byte as a token id")
        self.model.on_controller = self.count_controller

    def describe(self):
        m = self.model
        return fca_adapter.Description(
            family="mudd-pytorch",
            description=f"mudd L {m.L}, D {m.D}, H {m.H}, V {m.V} (bytes, PyTorch)",
            model_sha256=fca_adapter.sha256_files(m.files),
            vocab=m.V, max_tokens=m.block_size, tokenizer="bytes",
            layers=m.L, streams=4, sources=m.L + 1,
            mask=m.coefficient_mask(), identity=m.identity_coefficients(),
            static_profile="StaticMixMean", structure_removed="SourceUniformMean",
            config=m.config, parameter_count=m.parameter_count())

    def forward(self, ids, coefficients=None):
        logits, alpha = self.model.forward(ids, coefficients)
        return logits, (coefficients if coefficients is not None else alpha)


if __name__ == "__main__":
    fca_adapter.main(lambda args: MuddAdapter(args.model))
