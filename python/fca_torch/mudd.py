"""MUDD (dynamic dense cross-layer connections on a Pythia trunk) as a trainable PyTorch module,
in fca's folder format: config.json + model.safetensors with the reference implementation's tensor
names (docs/mudd.md). Models trained by `fca train --arch mudd` load here and models trained here
load in fca.

Numerics are fca's "mode F" (docs/mudd.md): RoPE cos/sin tables rounded to fp16, masked scores
-65504, exact erf GELU, every norm with eps = norm_eps, parallel residual (R + A) + F, QK RMSNorm
(one scale shared by the heads) before partial NeoX rotary, and the signed, unnormalised mixing
Y^c = sum_j alpha[c, j] X_j in source order. The controller is DA module i, `dynamic_dense.{i}`:
its output is the post-bias alpha [C_i, B, T, S_i], which fca's hooks record live and hand back in
replay (`hooked_adapter`).

Shapes: B windows, T tokens, D width, H heads, dh = D / H, L layers, C_i streams of DA i (4, or 1
after the last block), S_i = i + 2 sources X_0 .. X_{i+1}, V vocabulary (256 for byte models).
"""

import json
import math
import os
import warnings
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F

from . import checkpoint

MASKED_SCORE = -65504.0   # the reference's causal-mask fill (fp16's minimum)
REQUIRED_TRUE = ("use_qk_norm", "use_parallel_residual", "dense", "dynamic_dense", "sepln")


def make_config(n_layer: int, dim: int, n_head: int, seq_len: int, vocab_size: int = 256) -> dict:
    """The config fca writes for a byte-level model it trains (src/models/mudd/config.cpp)."""
    if n_layer < 2:
        raise ValueError(f"the mudd family needs at least 2 layers, found {n_layer}")
    if dim <= 0 or n_head <= 0 or dim % n_head != 0:
        raise ValueError(f"mudd: heads {n_head} must divide dim {dim}")
    head_dim = dim // n_head
    if int(head_dim * 0.25) % 2 != 0 or int(head_dim * 0.25) == 0:
        raise ValueError(f"mudd: a quarter of the head width ({head_dim}/4) must be a positive even number")
    return {"architectures": ["MUDDPythia"], "model_type": "muddpythia", "block_size": seq_len, "vocab_size": vocab_size,
            "n_layer": n_layer, "n_head": n_head, "n_local_heads": n_head, "dim": dim, "head_dim": head_dim,
            "intermediate_size": 4 * dim, "rope_base": 10000.0, "rotary_pct": 0.25, "norm_eps": 1e-05,
            "use_qk_norm": True, "use_parallel_residual": True, "use_linear_bias": True, "dense": True,
            "dynamic_dense": True, "dense_type": "qkvr", "sepln": True, "expand_last": True, "round64": True,
            "stack_hidden": False, "use_layer_cache": True, "tie_word_embeddings": False, "bos_token_id": 0,
            "eos_token_id": 0, "torch_dtype": "float32"}


def ffn_width(config: dict, i: int) -> int:
    """round(I (i/(L-1) + 0.5) / 128) * 128 with Python's round, as the reference."""
    L = config["n_layer"]
    return round(config["intermediate_size"] * (i / (L - 1) + 0.5) / 128) * 128


def streams(config: dict, i: int) -> int:
    return 4 if i < config["n_layer"] - 1 else 1


def da_hidden(config: dict, i: int) -> int:
    base = streams(config, i) * (i + 2) * (4 if i == config["n_layer"] - 1 and config.get("expand_last") else 1)
    return (base // 64 + 1) * 64 if config.get("round64") else base


class Rms(torch.nn.Module):
    """x / sqrt(mean(x^2) + eps) times a scale shared by the heads (QK-norm), over the last dim."""

    def __init__(self, width: int, eps: float):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(torch.nn.Module):
    def __init__(self, config: dict):
        super().__init__()
        D, eps = config["dim"], config["norm_eps"]
        self.H, self.dh = config["n_head"], config["head_dim"]
        self.rot = int(self.dh * config["rotary_pct"])
        for name in ("wq", "wk", "wv", "wo"):
            setattr(self, name, torch.nn.Linear(D, D))
        self.q_norm, self.k_norm = Rms(self.dh, eps), Rms(self.dh, eps)
        half = self.rot // 2
        inv_freq = 1.0 / (config["rope_base"] ** (torch.arange(0, self.rot, 2)[:half].float() / self.rot))
        theta = torch.outer(torch.arange(config["block_size"]).float(), inv_freq)
        # fp16-rounded tables used in fp32 (the reference's port); buffers, so .to(device) moves them.
        self.register_buffer("cos", torch.cos(theta).half().float(), persistent=False)
        self.register_buffer("sin", torch.sin(theta).half().float(), persistent=False)

    def rope(self, x):
        """x [B, T, H, dh]: NeoX rotate-half on dims 0..rot-1, the rotated pairs written interleaved
        as the reference writes them (q and k share the permutation, so q.k is the same sum)."""
        T, half = x.shape[1], self.rot // 2
        cos, sin = self.cos[:T, None, :].to(x.dtype), self.sin[:T, None, :].to(x.dtype)
        x1, x2, rest = x[..., :half], x[..., half:self.rot], x[..., self.rot:]
        pairs = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
        return torch.cat([pairs.flatten(-2), rest], dim=-1)

    def forward(self, q_in, k_in, v_in):
        B, T, D = q_in.shape
        q = self.rope(self.q_norm(self.wq(q_in).view(B, T, self.H, self.dh))).transpose(1, 2)
        k = self.rope(self.k_norm(self.wk(k_in).view(B, T, self.H, self.dh))).transpose(1, 2)
        v = self.wv(v_in).view(B, T, self.H, self.dh).transpose(1, 2)
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.dh))
        probs = torch.softmax(scores.masked_fill(~causal, MASKED_SCORE).float(), dim=-1).to(v.dtype)
        return self.wo((probs @ v).transpose(1, 2).reshape(B, T, D))


class FeedForward(torch.nn.Module):
    def __init__(self, D: int, width: int):
        super().__init__()
        # The width formula gives 0 for narrow models (I / 2 < 64: block 0 of D 32); fca runs such
        # a block's FFN as zero columns, and torch's initialiser warns about the empty weights.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Initializing zero-element tensors")
            self.w1, self.w2 = torch.nn.Linear(D, width), torch.nn.Linear(width, D)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)))


class Block(torch.nn.Module):
    """Block i: X_{i+1} = (R + A) + F from the Q, K, V, R streams (block 0: all X_0, one input norm)."""

    def __init__(self, config: dict, i: int):
        super().__init__()
        D, eps = config["dim"], config["norm_eps"]
        if i == 0:
            self.attention_norm = torch.nn.LayerNorm(D, eps=eps)
        else:
            self.attention_norms = torch.nn.ModuleList(torch.nn.LayerNorm(D, eps=eps) for _ in range(3))
        self.ffn_norm = torch.nn.LayerNorm(D, eps=eps)
        self.attention = Attention(config)
        self.feed_forward = FeedForward(D, ffn_width(config, i))

    def forward(self, q_s, k_s, v_s, r_s):
        if hasattr(self, "attention_norm"):
            a = self.attention_norm(r_s)
            attn = self.attention(a, a, a)
        else:
            n = self.attention_norms
            attn = self.attention(n[0](q_s), n[1](k_s), n[2](v_s))
        return (r_s + attn) + self.feed_forward(self.ffn_norm(r_s))


class DynamicDense(torch.nn.Module):
    """DA module i, the controller: alpha = W2 GELU(W1 rms(X_{i+1})) + dense_bs_i, returned as
    [C_i, B, T, S_i] (the flat generator output is stream-major: index c * S_i + j)."""

    def __init__(self, config: dict, i: int):
        super().__init__()
        D, hidden = config["dim"], da_hidden(config, i)
        self.C, self.S, self.eps = streams(config, i), i + 2, config["norm_eps"]
        self.w1 = torch.nn.Linear(D, hidden, bias=False)
        self.w2 = torch.nn.Linear(hidden, self.C * self.S, bias=False)

    def forward(self, x, dense_bs):
        n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        alpha = self.w2(F.gelu(self.w1(n))).view(*x.shape[:2], self.C, self.S) + dense_bs
        return alpha.permute(2, 0, 1, 3)


class Mudd(torch.nn.Module):
    def __init__(self, config: dict):
        super().__init__()
        for key in REQUIRED_TRUE:
            if not config.get(key, False):
                raise ValueError(f"config.json: {key} must be true (the only MUDD variant fca implements)")
        if config.get("dense_type", "qkvr") != "qkvr" or config.get("n_local_heads", config["n_head"]) != config["n_head"]:
            raise ValueError("config.json: dense_type must be 'qkvr' and n_local_heads equal n_head")
        self.config = dict(config)
        c = self.config
        self.L, self.D, self.H, self.V = c["n_layer"], c["dim"], c["n_head"], c["vocab_size"]
        self.seq_len = c["block_size"]
        self.tok_embeddings = torch.nn.Embedding(self.V, self.D)
        self.layers = torch.nn.ModuleList(Block(c, i) for i in range(self.L))
        self.dense_bs = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(streams(c, i), i + 2)) for i in range(self.L))
        self.dynamic_dense = torch.nn.ModuleList(DynamicDense(c, i) for i in range(self.L))
        self.norm = torch.nn.LayerNorm(self.D, eps=c["norm_eps"])
        self.output = torch.nn.Linear(self.D, self.V, bias=False)

    def forward(self, ids: torch.Tensor, return_alpha: bool = False):
        """ids int64 [B, T] -> logits [B, T, V] (and the alphas, one [C_i, B, T, S_i] per module)."""
        if ids.shape[1] > self.seq_len:
            raise ValueError(f"{ids.shape[1]} tokens exceed block_size {self.seq_len} (the RoPE table)")
        X = [self.tok_embeddings(ids)]
        mixed = [X[0]] * 4
        alphas = []
        for i in range(self.L):
            X.append(self.layers[i](*mixed))
            alpha = self.dynamic_dense[i](X[-1], self.dense_bs[i])                    # [C, B, T, S]
            alphas.append(alpha)
            mixed = []
            for c in range(alpha.shape[0]):
                y = alpha[c, :, :, 0, None] * X[0]
                for j in range(1, i + 2):
                    y = y + alpha[c, :, :, j, None] * X[j]
                mixed.append(y)
        logits = self.output(self.norm(mixed[0]))
        return (logits, alphas) if return_alpha else logits

    # ---- parameters ------------------------------------------------------------------------------

    def fca_state(self) -> Dict[str, torch.Tensor]:
        return dict(self.named_parameters())

    def initialize(self, seed: int) -> None:
        """fca's scheme (docs/mudd.md, Training): every DA's W2 zero and dense_bs one-hot on the
        newest source (a plain transformer at step 0), biases 0, norm scales 1, normal(0, 0.02)
        elsewhere except attention.wo and feed_forward.w2 at 0.02 / sqrt(2L). The draws are torch's
        (one CPU generator seeded with `seed`, tensors in layout order), not fca's stream."""
        gen = torch.Generator().manual_seed(int(seed))
        residual_std = 0.02 / math.sqrt(2 * self.L)
        with torch.no_grad():
            for n, p in self.fca_state().items():
                if n.startswith("dense_bs."):
                    p.zero_()
                    p[:, -1] = 1.0
                elif n.endswith(".bias") or (n.startswith("dynamic_dense.") and n.endswith("w2.weight")):
                    p.zero_()
                elif "norm" in n:
                    p.fill_(1.0)
                else:
                    std = residual_std if n.endswith(("attention.wo.weight", "feed_forward.w2.weight")) else 0.02
                    p.copy_(torch.empty(p.shape).normal_(0.0, std, generator=gen))

    def flops_per_token(self, tokens: int) -> float:
        """Training FLOPs per token (3x the forward, multiply-add = 2): Linear layers, DA
        generators, both attention products over T x T, and the head."""
        c, D = self.config, self.D
        forward = 2 * D * self.V
        for i in range(self.L):
            forward += 2 * (4 * D * D + 2 * D * ffn_width(c, i)) + 4 * tokens * D
            forward += 2 * da_hidden(c, i) * (D + streams(c, i) * (i + 2))
        return 3.0 * forward

    # ---- fca's folder format ----------------------------------------------------------------------

    @classmethod
    def load(cls, folder: str) -> "Mudd":
        path = os.path.join(folder, "config.json")
        try:
            with open(path) as f:
                config = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: cannot read the model's config ({e})") from None
        model = cls(config)
        tensors: Dict[str, torch.Tensor] = {}
        for file in weight_files(folder):
            tensors.update(checkpoint.read_tensors(file)[0])
        own = model.fca_state()
        problems = [f"tensor '{n}' is missing (expected shape {list(p.shape)})" for n, p in own.items() if n not in tensors]
        problems += [f"tensor '{n}': shape {list(tensors[n].shape)}, expected {list(p.shape)}"
                     for n, p in own.items() if n in tensors and tuple(tensors[n].shape) != tuple(p.shape)]
        if problems:
            raise ValueError(f"{folder}: " + "; ".join(problems))
        with torch.no_grad():
            for n, p in own.items():
                p.copy_(tensors[n])
        return model

    def save(self, folder: str, metadata: Optional[Dict[str, str]] = None) -> None:
        os.makedirs(folder, exist_ok=True)
        meta = {"format": "pt", "fca_version": checkpoint.version_string()}
        meta.update(metadata or {})
        checkpoint.write_tensors(os.path.join(folder, "model.safetensors"), self.fca_state(), meta)
        checkpoint.write_text(os.path.join(folder, "config.json"), json.dumps(self.config, indent=2) + "\n")

    def label(self) -> str:
        return "mudd"

    # ---- fca's audit and exec through hooks -------------------------------------------------------

    def hooked_adapter(self, model_files: List[str], reference=None, name=None):
        """Controllers `dynamic_dense.*` ([C_i, B, T, S_i] each, laid out with fca's validity mask),
        executed blocks `layers.*`, identity the one-hot newest source; StaticMixMean /
        SourceUniformMean as fca's native audit of the family."""
        import fca_adapter
        identity = torch.zeros(self.L, 4, self.L + 1)
        for i in range(self.L):
            identity[i, :streams(self.config, i), i + 1] = 1.0
        return fca_adapter.HookedAdapter(
            self, forward=lambda ids: self(ids), controllers={"dynamic_dense.*": "S B T K"}, identity=identity,
            static_profile="StaticMixMean", structure_removed="SourceUniformMean", vocab=self.V, max_tokens=self.seq_len,
            description=f"mudd L {self.L}, D {self.D}, H {self.H}, T {self.seq_len} (fca_torch)",
            model_sha256=fca_adapter.sha256_files(list(model_files)), executed={"blocks": "layers.*"},
            reference=reference, name=name, family="fca_torch mudd")


def weight_files(folder: str) -> List[str]:
    """The shards named by model.safetensors.index.json, else model.safetensors."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            names = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(folder, n) for n in names]
    single = os.path.join(folder, "model.safetensors")
    if not os.path.exists(single):
        raise FileNotFoundError(f"{folder}: neither model.safetensors nor model.safetensors.index.json")
    return [single]
