"""The gated byte-level transformer family (fca-gated-v1) in plain PyTorch, behind fca's adapter.

Audit an fca checkpoint through PyTorch instead of fca's own engine:

    fca audit --external "python3 examples/gated_adapter.py --model runs/featuregate.safetensors" \
              --data data/nlp-corpus --out audits/featuregate-pytorch

Written from docs/model.md: pre-LN blocks, h_{l+1} = h_l + g_l * F_l(h_l) with
F_l = attention update u plus MLP update w, and g_l from the gate (dense 1, fixed c, uniform and
layerstatic sigmoid(logit), featuregate sigmoid(b_l + phi . w_l) over four stop-gradient features
of the block). The coefficient tensor is g per window, [L, T, 1, 1]. Shapes: B windows, T
positions, L layers, D width, H heads, dh = D / H, V = 256 bytes.
"""

import json
import math
import os
import sys
from typing import Optional

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fca_adapter  # noqa: E402

LN_EPS = 1e-5
NORM_EPS = 1e-6  # phi_3 = ||F|| / (||h|| + 1e-6)


class GateController(torch.nn.Module):
    """The controller as a module of its own, as third-party code would write it: layer l's gate
    g [B, T], for featuregate from the block's features phi [B, T, 4], which it computes itself
    from the block's statistics (so that a replay, which never calls the controller, computes none
    of them); the other gates ignore the statistics."""

    def __init__(self, P, config):
        super().__init__()
        self.gate, self.gate_value = config["gate"], float(config.get("gate_value", 0.6))
        for name in ("gate.logit", "gate.bias", "gate.weight"):
            if name in P:
                setattr(self, name.split(".")[1], torch.nn.Parameter(P[name], requires_grad=False))

    def forward(self, l: int, B: int, T: int, statistics: tuple) -> torch.Tensor:
        if self.gate == "dense":
            return torch.ones(B, T)
        if self.gate == "fixed":
            return torch.full((B, T), self.gate_value)
        if self.gate == "uniform":
            return torch.sigmoid(self.logit[0]).expand(B, T)
        if self.gate == "layerstatic":
            return torch.sigmoid(self.logit[l]).expand(B, T)
        phi = features(*statistics)                                                    # [B, T, 4]
        return torch.sigmoid(self.bias[l] + phi @ self.weight[l])


class Block(torch.nn.Module):
    """One pre-LN block's update F_l(h) = u + w, as a module of its own (so that hooks see which
    blocks run and on how many rows). It reads the checkpoint's tensors of block l from P."""

    def __init__(self, P, l: int, D: int, H: int):
        super().__init__()
        self.P, self.p, self.D, self.H = P, f"blocks.{l}.", D, H

    def forward(self, h: torch.Tensor, causal: torch.Tensor):
        """h [B, T, D] -> (F_l [B, T, D], the scores s [B, H, T, T], log-attention logp)."""
        P, p, D, H = self.P, self.p, self.D, self.H
        B, T, _ = h.shape
        dh = D // H
        a = F.layer_norm(h, (D,), P[p + "ln1.weight"], P[p + "ln1.bias"], LN_EPS)
        qkv = a @ P[p + "attn.qkv.weight"].T + P[p + "attn.qkv.bias"]
        q, k, v = (t.view(B, T, H, dh).transpose(1, 2) for t in qkv.split(D, dim=-1))
        s = ((q @ k.transpose(-1, -2)) / math.sqrt(dh)).masked_fill(~causal, float("-inf"))  # [B, H, T, T]
        logp = torch.log_softmax(s, dim=-1)
        u = (logp.exp() @ v).transpose(1, 2).reshape(B, T, D) @ P[p + "attn.proj.weight"].T + P[p + "attn.proj.bias"]
        m = F.layer_norm(h + u, (D,), P[p + "ln2.weight"], P[p + "ln2.bias"], LN_EPS)
        w = F.gelu(m @ P[p + "mlp.fc.weight"].T + P[p + "mlp.fc.bias"], approximate="tanh")
        return u + w @ P[p + "mlp.proj.weight"].T + P[p + "mlp.proj.bias"], s, logp


class GatedTransformer(torch.nn.Module):
    """Forward pass over an fca-gated-v1 checkpoint's tensors, float32, no autograd. The trunk's
    tensors are buffers (so that the module's state is the whole checkpoint), the gate's are the
    parameters of its controller module; each block's update is a Block module."""

    def __init__(self, path: str):
        super().__init__()
        self.P, meta = fca_adapter.read_safetensors_file(path)
        if meta.get("format") != "fca-gated-v1":
            raise fca_adapter.AdapterError(f"{path}: format {meta.get('format')!r}, expected 'fca-gated-v1'")
        self.config = json.loads(meta["config"])
        c = self.config
        self.L, self.D, self.H, self.seq_len, self.gate = c["n_layer"], c["d_model"], c["n_head"], c["seq_len"], c["gate"]
        for name, t in self.P.items():
            if not name.startswith("gate."):
                self.register_buffer(name.replace(".", "__"), t)
        self.blocks = torch.nn.ModuleList(Block(self.P, l, self.D, self.H) for l in range(self.L))
        self.controller = GateController(self.P, c)

    def forward(self, x: torch.Tensor, gates: Optional[torch.Tensor], on_controller=lambda: None):
        """x int64 [B, T]; gates None (live) or [B, L, T] to replay. Returns logits [B, T, V], g [B, L, T]."""
        P, L, D = self.P, self.L, self.D
        B, T = x.shape
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        h = P["wte"][x] + P["wpe"][:T]
        used, prev_logp = [], None
        for l in range(L):
            upd, s, logp = self.blocks[l](h, causal)                                            # F_l [B, T, D]
            if gates is None:        # live: run the controller
                g = self.controller(l, B, T, (s, logp, prev_logp, causal, upd, h))
                on_controller()
            else:                    # replay: the handed coefficients, never the controller
                g = gates[:, l, :]
            prev_logp = logp
            used.append(g)
            h = h + g[..., None] * upd
        logits = F.layer_norm(h, (D,), P["ln_f.weight"], P["ln_f.bias"], LN_EPS) @ P["wte"].T
        return logits, torch.stack(used, dim=1)


def features(s, logp, prev_logp, causal, upd, h) -> torch.Tensor:
    """featuregate's phi [B, T, 4], each averaged over heads: normalised attention entropy, KL to the
    previous layer's attention (0 at layer 0), logsumexp of the scores minus log(t+1), and the
    update-to-state norm ratio."""
    T = s.shape[-1]
    zero = torch.zeros((), dtype=s.dtype)
    logp_in = torch.where(causal, logp, zero)           # 0 * -inf must not make NaN above the diagonal
    p = logp.exp()
    log_n = torch.log(torch.arange(1, T + 1, dtype=s.dtype))
    phi0 = -(p * logp_in).sum(-1).mean(1) / torch.cat([log_n.new_ones(1), log_n[1:]])
    phi0[:, 0] = 0.0
    phi1 = torch.zeros_like(phi0) if prev_logp is None else (p * torch.where(causal, logp - prev_logp, zero)).sum(-1).mean(1)
    phi2 = (torch.logsumexp(s, dim=-1) - log_n).mean(1)
    phi3 = upd.norm(dim=-1) / (h.norm(dim=-1) + NORM_EPS)
    return torch.stack([phi0, phi1, phi2, phi3], dim=-1)


class GatedAdapter(fca_adapter.Adapter):
    executed = {"blocks": "blocks.*"}          # fca exec: the modules whose rows are the executed blocks

    def __init__(self, path: str):
        super().__init__()
        self.path = path
        self.model = GatedTransformer(path)

    def describe(self) -> fca_adapter.Description:
        m = self.model
        return fca_adapter.Description(
            family="gated-pytorch",
            description=f"{m.gate} L {m.L}, D {m.D}, H {m.H}, T {m.seq_len} (PyTorch)",
            model_sha256=fca_adapter.sha256_files([self.path]),
            vocab=256, max_tokens=m.seq_len, layers=m.L, streams=1, sources=1,
            identity=torch.ones(m.L, 1, 1),               # g = 1: a plain residual stream
            static_profile="LayerMean", structure_removed="GlobalMean",
            config=m.config, parameter_count=sum(t.numel() for t in m.P.values()))

    def exec_controllers(self):
        return ["controller"]                   # fca exec: the products inside it are the controller's

    def run(self, ids, coefficients=None):
        """The pass fca exec counts and times: logits only (no record reshaped for fca)."""
        gates = None if coefficients is None else coefficients[:, :, :, 0, 0]
        return self.model.forward(ids, gates, self.count_controller)[0]

    def forward(self, ids, coefficients=None):
        B, T = ids.shape
        gates = None if coefficients is None else coefficients[:, :, :, 0, 0]      # [B, L, T]
        logits, used = self.model.forward(ids, gates, self.count_controller)
        return logits, used.reshape(B, self.model.L, T, 1, 1)


if __name__ == "__main__":
    fca_adapter.main(lambda args: GatedAdapter(args.model))
