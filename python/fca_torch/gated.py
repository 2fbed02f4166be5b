"""The gated byte-level transformer family (format fca-gated-v1) as a trainable PyTorch module.

Parameter names, shapes and layout are fca's (docs/checkpoint-format.md), so `state_dict()` is the
checkpoint: a checkpoint trained by either engine loads in the other. The forward pass is
docs/model.md's:

    h_0 = wte[x] + wpe[:T];  h_{l+1} = h_l + g_l * F_l(h_l);  logits = LayerNorm(h_L) wte^T

with F_l the block's attention update plus its MLP update and g_l [B, T] from the controller, the
module `gate` (called once per layer: dense 1, fixed c, uniform / layerstatic sigmoid(logit),
featuregate sigmoid(bias_l + phi . w_l) over four stop-gradient features it computes itself from
the block's attention statistics). Because the controller is one module called once per layer,
fca audits the model through hooks with no code of the user's (`hooked_adapter`): a replay
replaces `gate`'s output and never runs it.

Shapes: B windows, T positions (T <= seq_len), L layers, D width, H heads, dh = D / H, V = 256.
"""

import json
import math
from typing import Dict, Optional

import torch
import torch.nn.functional as F

from . import checkpoint

FORMAT = "fca-gated-v1"
GATES = ("dense", "fixed", "uniform", "layerstatic", "featuregate")
VOCAB = 256
LN_EPS = 1e-5
NORM_EPS = 1e-6            # phi_3 = ||F|| / (||h|| + 1e-6)
CONFIG_KEYS = ("n_layer", "d_model", "n_head", "seq_len", "gate", "gate_value")


def make_config(n_layer: int, d_model: int, n_head: int, seq_len: int, gate: str, gate_value: float = 0.6) -> dict:
    """A checked fca-gated-v1 config, fields in fca's order."""
    config = {"n_layer": int(n_layer), "d_model": int(d_model), "n_head": int(n_head), "seq_len": int(seq_len),
              "gate": gate, "gate_value": float(gate_value)}
    check_config(config)
    return config


def check_config(config: dict, where: str = "config") -> None:
    unknown = [k for k in config if k not in CONFIG_KEYS]
    missing = [k for k in CONFIG_KEYS[:5] if k not in config]
    if unknown or missing:
        raise ValueError(f"{where}: unknown fields {unknown} / missing fields {missing} for {FORMAT}")
    for key in CONFIG_KEYS[:4]:
        if not isinstance(config[key], int) or config[key] <= 0:
            raise ValueError(f"{where}: {key} must be a positive integer, found {config[key]!r}")
    if config["gate"] not in GATES:
        raise ValueError(f"{where}: gate {config['gate']!r} is not one of {', '.join(GATES)}")
    if config["d_model"] % config["n_head"] != 0:
        raise ValueError(f"{where}: d_model {config['d_model']} is not divisible by n_head {config['n_head']}")


class GateController(torch.nn.Module):
    """The controller: layer l's gate g [B, T]. Its parameters are the checkpoint's gate.* tensors."""

    def __init__(self, gate: str, n_layer: int, gate_value: float):
        super().__init__()
        self.gate, self.gate_value = gate, gate_value
        if gate == "uniform":
            self.logit = torch.nn.Parameter(torch.zeros(1))
        elif gate == "layerstatic":
            self.logit = torch.nn.Parameter(torch.zeros(n_layer))
        elif gate == "featuregate":
            self.weight = torch.nn.Parameter(torch.zeros(n_layer, 4))
            self.bias = torch.nn.Parameter(torch.zeros(n_layer))

    def forward(self, layer: int, like: torch.Tensor, statistics: Optional[tuple]) -> torch.Tensor:
        """like: the block input h_l [B, T, D] (for shape, dtype and device); statistics: featuregate's
        (scores, log-attention, previous layer's log-attention, F_l, h_l), else None."""
        B, T = like.shape[:2]
        if self.gate == "dense":
            return torch.ones(B, T, dtype=like.dtype, device=like.device)
        if self.gate == "fixed":
            return torch.full((B, T), self.gate_value, dtype=like.dtype, device=like.device)
        if self.gate in ("uniform", "layerstatic"):
            return torch.sigmoid(self.logit[0 if self.gate == "uniform" else layer]).to(like.dtype).expand(B, T)
        phi = features(*statistics)                                                      # [B, T, 4]
        return torch.sigmoid(self.bias[layer] + phi.to(self.weight.dtype) @ self.weight[layer])


@torch.no_grad()
def features(s, logp, prev_logp, upd, h) -> torch.Tensor:
    """featuregate's phi [B, T, 4], without autograd (the stop-gradient): per head then averaged
    over heads, the normalised attention entropy (0 at t = 0), the KL to the previous layer's
    attention (0 at layer 0, from log-softmax values), logsumexp of the scores minus log(t + 1),
    and ||F_l|| / (||h_l|| + 1e-6). s, logp: [B, H, T, T] with -inf above the diagonal."""
    s, logp, upd, h = s.float(), logp.float(), upd.float(), h.float()
    T = s.shape[-1]
    causal = torch.ones(T, T, dtype=torch.bool, device=s.device).tril()
    zero = torch.zeros((), dtype=s.dtype, device=s.device)
    p = logp.exp()
    log_n = torch.log(torch.arange(1, T + 1, dtype=s.dtype, device=s.device))           # log(t + 1)
    phi0 = -(p * torch.where(causal, logp, zero)).sum(-1).mean(1) / torch.cat([log_n.new_ones(1), log_n[1:]])
    phi0[:, 0] = 0.0
    if prev_logp is None:
        phi1 = torch.zeros_like(phi0)
    else:
        phi1 = (p * torch.where(causal, logp - prev_logp.float(), zero)).sum(-1).mean(1)
    phi2 = (torch.logsumexp(s, dim=-1) - log_n).mean(1)
    phi3 = upd.norm(dim=-1) / (h.norm(dim=-1) + NORM_EPS)
    return torch.stack([phi0, phi1, phi2, phi3], dim=-1)


class Attention(torch.nn.Module):
    def __init__(self, D: int, H: int):
        super().__init__()
        self.H = H
        self.qkv = torch.nn.Linear(D, 3 * D)
        self.proj = torch.nn.Linear(D, D)

    def forward(self, a: torch.Tensor, statistics: bool):
        """a [B, T, D] -> (u [B, T, D], scores and log-attention [B, H, T, T] when asked for, else None)."""
        B, T, D = a.shape
        dh = D // self.H
        q, k, v = (t.view(B, T, self.H, dh).transpose(1, 2) for t in self.qkv(a).split(D, dim=-1))
        if not statistics and hasattr(F, "scaled_dot_product_attention"):
            y, s, logp = F.scaled_dot_product_attention(q, k, v, is_causal=True), None, None   # PyTorch 2: fused
        else:
            causal = torch.ones(T, T, dtype=torch.bool, device=a.device).tril()
            s = ((q @ k.transpose(-1, -2)) / math.sqrt(dh)).masked_fill(~causal, float("-inf"))
            logp = torch.log_softmax(s.float(), dim=-1)
            y = logp.exp().to(v.dtype) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, D)), s, logp


class Mlp(torch.nn.Module):
    def __init__(self, D: int):
        super().__init__()
        self.fc = torch.nn.Linear(D, 4 * D)
        self.proj = torch.nn.Linear(4 * D, D)

    def forward(self, m: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(m), approximate="tanh"))


class Block(torch.nn.Module):
    """Block l's ungated update F_l(h) = u + w (pre-LN attention, then the MLP on LN(h + u))."""

    def __init__(self, D: int, H: int):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(D, eps=LN_EPS)
        self.attn = Attention(D, H)
        self.ln2 = torch.nn.LayerNorm(D, eps=LN_EPS)
        self.mlp = Mlp(D)

    def forward(self, h: torch.Tensor, statistics: bool):
        """h [B, T, D] -> (F_l [B, T, D], scores, log-attention)."""
        u, s, logp = self.attn(self.ln1(h), statistics)
        return u + self.mlp(self.ln2(h + u)), s, logp


class GatedTransformer(torch.nn.Module):
    def __init__(self, config: dict):
        super().__init__()
        check_config(config)
        self.config = dict(config)
        c = self.config
        self.L, self.D, self.H, self.seq_len, self.gate_kind = c["n_layer"], c["d_model"], c["n_head"], c["seq_len"], c["gate"]
        self.wte = torch.nn.Parameter(torch.zeros(VOCAB, self.D))
        self.wpe = torch.nn.Parameter(torch.zeros(self.seq_len, self.D))
        self.blocks = torch.nn.ModuleList(Block(self.D, self.H) for _ in range(self.L))
        self.ln_f = torch.nn.LayerNorm(self.D, eps=LN_EPS)
        self.gate = GateController(self.gate_kind, self.L, float(c.get("gate_value", 0.6)))

    # ---- the forward pass ---------------------------------------------------------------------

    def forward(self, x: torch.Tensor, return_gates: bool = False):
        """x int64 [B, T] -> logits [B, T, 256] (and g [B, L, T] with return_gates)."""
        B, T = x.shape
        if T > self.seq_len:
            raise ValueError(f"{T} tokens exceed seq_len {self.seq_len}")
        statistics = self.gate_kind == "featuregate"
        h = self.wte[x] + self.wpe[:T]
        gates, prev_logp = [], None
        for l, block in enumerate(self.blocks):
            upd, s, logp = block(h, statistics)
            g = self.gate(l, h, (s, logp, prev_logp, upd, h) if statistics else None)
            prev_logp = logp
            gates.append(g)
            h = h + g[..., None].to(upd.dtype) * upd
        logits = self.ln_f(h) @ self.wte.T
        return (logits, torch.stack(gates, dim=1)) if return_gates else logits

    # ---- parameters: fca's layout, initialisation and weight decay -----------------------------

    def fca_state(self) -> Dict[str, torch.Tensor]:
        """name -> tensor in fca's layout order (docs/checkpoint-format.md)."""
        return dict(self.named_parameters())

    def initialize(self, seed: int) -> None:
        """fca's scheme (docs/model.md): normal(0, 0.02) for wte, wpe, qkv and fc weights,
        normal(0, 0.02 / sqrt(2L)) for attn.proj and mlp.proj weights, zero biases, LayerNorm
        weights 1, gate parameters 0 (g starts at 0.5). The draws are torch's (one CPU generator
        seeded with `seed`, tensors in layout order), not fca's xoshiro stream: the same scheme,
        not the same bits. Gate parameters draw nothing, so the variants of one seed share the trunk."""
        gen = torch.Generator().manual_seed(int(seed))
        residual_std = 0.02 / math.sqrt(2 * self.L)
        with torch.no_grad():
            for name, p in self.fca_state().items():
                if name in ("wte", "wpe") or name.endswith(("qkv.weight", "fc.weight")):
                    p.copy_(torch.empty(p.shape).normal_(0.0, 0.02, generator=gen))
                elif name.endswith(("attn.proj.weight", "mlp.proj.weight")):
                    p.copy_(torch.empty(p.shape).normal_(0.0, residual_std, generator=gen))
                elif name.endswith(("ln1.weight", "ln2.weight")) or name == "ln_f.weight":
                    p.fill_(1.0)
                else:
                    p.zero_()

    def flops_per_token(self, tokens: int) -> float:
        """Training FLOPs per token (multiply-add = 2; 3x the forward): the Linear layers, the
        two attention products over all T x T pairs (what the unfused model multiplies) and the head."""
        D = self.D
        forward = self.L * (24 * D * D + 4 * tokens * D) + 2 * D * VOCAB
        return 3.0 * forward

    # ---- fca checkpoints -----------------------------------------------------------------------

    @classmethod
    def load(cls, path: str) -> "GatedTransformer":
        tensors, meta = checkpoint.read_tensors(path)
        if meta.get("format") != FORMAT:
            raise ValueError(f"{path}: format {meta.get('format')!r}, expected {FORMAT!r}")
        try:
            config = json.loads(meta["config"])
        except (KeyError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: metadata field 'config' is missing or not JSON ({e})") from None
        check_config(config, f"{path}: config")
        model = cls(config)
        model.load_fca_state(tensors, path)
        return model

    def load_fca_state(self, tensors: Dict[str, torch.Tensor], where: str) -> None:
        own = self.fca_state()
        problems = [f"tensor '{n}' is missing (expected shape {list(p.shape)})" for n, p in own.items() if n not in tensors]
        problems += [f"unexpected tensor '{n}'" for n in tensors if n not in own]
        problems += [f"tensor '{n}': shape {list(tensors[n].shape)}, expected {list(p.shape)}"
                     for n, p in own.items() if n in tensors and tuple(tensors[n].shape) != tuple(p.shape)]
        if problems:
            raise ValueError(f"{where}: " + "; ".join(problems))
        with torch.no_grad():
            for n, p in own.items():
                p.copy_(tensors[n])

    def save(self, path: str, metadata: Optional[Dict[str, str]] = None) -> None:
        meta = {"format": FORMAT, "config": checkpoint.config_text(self.config), "fca_version": checkpoint.version_string()}
        meta.update(metadata or {})
        checkpoint.write_tensors(path, self.fca_state(), meta)

    def label(self) -> str:
        return self.gate_kind

    # ---- fca's audit and exec through hooks -----------------------------------------------------

    def hooked_adapter(self, model_files, reference=None, name=None):
        """A fca_adapter.HookedAdapter over this model: the controller is `gate` (one call per
        layer, g [B, T]), the executed blocks `blocks.*`, identity g = 1 (a plain residual stream);
        LayerMean / GlobalMean as fca's native audit of the family."""
        import fca_adapter
        return fca_adapter.HookedAdapter(
            self, forward=lambda ids: self(ids), controllers={"gate": "B T"}, identity=1.0,
            static_profile="LayerMean", structure_removed="GlobalMean",
            description=f"{self.gate_kind} L {self.L}, D {self.D}, H {self.H}, T {self.seq_len} (fca_torch)",
            model_sha256=fca_adapter.sha256_files(list(model_files)), executed={"blocks": "blocks.*"},
            reference=reference, name=name, family=f"fca_torch {self.gate_kind}")


def weight_decayed(name: str, p: torch.Tensor) -> bool:
    """fca's rule (docs/model.md): AdamW decays exactly the rank-2 tensors."""
    return p.dim() == 2
