"""Small models written in the styles of third-party code, audited through fca_adapter.HookedAdapter
with no change to the model: the tests' check that hooks alone make a model auditable.

    hooked_models.py --style STYLE [--fault FAULT]

Styles (byte-level, vocab 256, 16 positions, random weights of a fixed seed):
  mudd    a DynamicDense-like controller returning [C, B, T, L] mixing weights, with a different number
          of sources per layer (L grows with depth) and C = 2 streams
  moe     a router nn.Linear over flattened (B T) tokens, then inline softmax and top-2 over 4 experts
  twice   one gate module shared by two blocks: called twice per forward pass
  tuple   a gate returning (values, auxiliary loss), given with to_tensor / from_tensor converters
  bf16    a bf16 gate in a float32 model
  tensors a 0-dim learnable scale, a non-contiguous parameter, fp16/bool/integer buffers (one not
          persistent) and a tied head: the state is hashed as it is

Faults (each must be refused by fca):
  unused     the glob matches a module whose output the logits never use
  direct     the model calls the controller's inner Linear directly in replay (it runs anyway)
  inplace    the converter edits the controller's output in place: the run with hooks differs from the
             model's own
  classcall  the model also calls the gate's class-level forward, type(gate).forward(gate, x), which
             bypasses the module's hooks and its replacement in replay (it runs anyway)
"""

import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import fca_adapter  # noqa: E402

V, T_MAX, D = 256, 16, 16


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))

    def forward(self, x):
        return self.mlp(self.norm(x))


class Base(nn.Module):
    def __init__(self, n_layer=3):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.randn(T_MAX, D) * 0.1)
        self.blocks = nn.ModuleList(Block() for _ in range(n_layer))
        self.head = nn.Linear(D, V)
        self.config = type("Config", (), {"max_position_embeddings": T_MAX, "vocab_size": V})()

    def embed_ids(self, ids):
        return self.embed(ids) + self.pos[: ids.shape[1]]


# -- MUDD style: the controller returns [C, B, T, L] weights over the l + 1 earlier states --------
class DynamicDense(nn.Module):
    def __init__(self, sources, streams=2):
        super().__init__()
        self.proj = nn.Linear(D, streams * sources)
        self.streams, self.sources = streams, sources

    def forward(self, x):                     # x [B, T, D] -> [C, B, T, L]
        B, T, _ = x.shape
        w = self.proj(x).reshape(B, T, self.streams, self.sources)
        return w.permute(2, 0, 1, 3)


class MuddStyle(Base):
    def __init__(self):
        super().__init__()
        self.dynamic_dense = nn.ModuleList(DynamicDense(l + 2) for l in range(len(self.blocks)))

    def forward(self, ids):
        states = [self.embed_ids(ids)]
        for l, block in enumerate(self.blocks):
            w = self.dynamic_dense[l](states[-1])                 # [2, B, T, l + 2]
            mixed = [sum(w[c, ..., k, None] * states[k] for k in range(len(states))) for c in range(2)]
            states.append(mixed[0] + block(mixed[1]))
        return self.head(states[-1])


# -- MoE style: router Linear over flattened tokens, inline top-k ---------------------------------
class MoeLayer(nn.Module):
    def __init__(self, experts=4):
        super().__init__()
        self.router = nn.Linear(D, experts)
        self.experts = nn.ModuleList(nn.Linear(D, D) for _ in range(experts))

    def forward(self, x):
        B, T, _ = x.shape
        flat = x.reshape(B * T, D)
        weights, index = F.softmax(self.router(flat), dim=-1).topk(2, dim=-1)
        out = torch.zeros_like(flat)
        for slot in range(2):
            for e, expert in enumerate(self.experts):
                chosen = index[:, slot] == e
                out[chosen] += weights[chosen, slot, None] * expert(flat[chosen])
        return out.reshape(B, T, D)


class MoeStyle(Base):
    def __init__(self):
        super().__init__()
        self.moe = nn.ModuleList(MoeLayer() for _ in self.blocks)

    def forward(self, ids):
        x = self.embed_ids(ids)
        for block, moe in zip(self.blocks, self.moe):
            x = x + block(x)
            x = x + moe(x)
        return self.head(x)


# -- one gate called twice per forward; a tuple-returning gate; a bf16 gate ----------------------
class Gate(nn.Module):
    def __init__(self, dtype=torch.float32, aux=False, out_dtype=None):
        super().__init__()
        self.proj = nn.Linear(D, 1).to(dtype)
        self.aux, self.out_dtype = aux, out_dtype

    def forward(self, x):
        g = torch.sigmoid(self.proj(x.to(self.proj.weight.dtype)))        # [B, T, 1]
        if self.out_dtype is not None:    # computed in float32, emitted in fp16 (CPU torch has no fp16 GEMM)
            g = g.to(self.out_dtype)
        return (g, (g * g).mean()) if self.aux else g


class FlatGate(nn.Module):
    """A gate holding its parameters itself (no inner module: nothing but its own forward runs)."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1, D) * 0.1)
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return torch.sigmoid(F.linear(x, self.weight, self.bias))       # [B, T, 1]


class GatedStyle(Base):
    def __init__(self, shared=False, dtype=torch.float32, aux=False, unused=False, direct=False, out_dtype=None,
                 classcall=False):
        super().__init__()
        self.gates = nn.ModuleList(Gate(dtype, aux, out_dtype) for _ in range(1 if shared else len(self.blocks)))
        self.shared, self.aux, self.direct, self.classcall = shared, aux, direct, classcall
        if classcall:
            self.gates = nn.ModuleList(FlatGate() for _ in self.gates)
        self.probe = nn.Linear(D, 1) if unused else None

    def forward(self, ids):
        x = self.embed_ids(ids)
        for l, block in enumerate(self.blocks[:2] if self.shared else self.blocks):
            gate = self.gates[0 if self.shared else l]
            g = gate(x)
            if self.aux:
                g = g[0]
            if self.direct:       # third-party code that reads the gate's projection itself
                g = g + 0 * torch.sigmoid(gate.proj(x))
            if self.classcall:    # third-party code that runs the gate's class forward itself (result unused)
                _ = type(gate).forward(gate, x)
            x = x + g.to(x.dtype) * block(x)
        if self.probe is not None:
            _ = self.probe(x)     # computed and thrown away: its output never reaches the logits
        return self.head(x)


# -- tensors of every kind, as third-party code holds them -----------------------------------------
class TensorKinds(GatedStyle):
    """A gated model that also holds a learnable 0-dim scale (as a public hyper-connections
    implementation does), a non-contiguous parameter, fp16, bool and integer buffers (one not
    persistent) and an output head tied to the embedding: HookedAdapter hashes its state as it is."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(1.0))
        self.mix = nn.Parameter(torch.randn(D, D).t())                 # non-contiguous
        self.register_buffer("table", torch.randn(4).to(torch.float16))
        self.register_buffer("active", torch.tensor([True, False, True]))
        self.register_buffer("steps", torch.arange(3), persistent=False)
        self.head.weight = self.embed.weight                             # tied

    def forward(self, ids):
        x = self.embed_ids(ids) @ self.mix * self.scale + self.table.float().sum() * self.active.float().mean()
        for l, block in enumerate(self.blocks):
            x = x + self.gates[l](x) * block(x)
        return self.head(x)


def build(style, fault=None):
    """(model, controllers, identity) of a style."""
    torch.manual_seed({"mudd": 1, "moe": 2, "twice": 3, "tuple": 4, "bf16": 5, "tensors": 6, "fp16": 7}[style])
    if style == "mudd":
        return MuddStyle(), {"dynamic_dense.*": "S B T K"}, None
    if style == "moe":
        return MoeStyle(), {"moe.*.router": "(B T) K"}, None
    if style == "twice":
        return GatedStyle(shared=True), {"gates.0": "B T K"}, 1.0
    if style == "tuple":
        model = GatedStyle(aux=True, direct=fault == "direct")
        # fault "clamp": the converter hands the model its coefficients clamped to [0, 1], which
        # leaves every live sigmoid gate (so exact replay) as it is but not the probe's values.
        clamp = (lambda g: g.clamp(0.0, 1.0)) if fault == "clamp" else (lambda g: g)
        # fault "inplace": the converter caps the gate's output at 0.5 in place, so that the model
        # run with hooks (recording, and replay: the cap is idempotent) differs from the model alone.
        record = (lambda out: out[0].clamp_(max=0.5)) if fault == "inplace" else (lambda out: out[0])
        convert = fca_adapter.Controller("B T K", to_tensor=record,
                                         from_tensor=lambda g: (clamp(g), torch.zeros(())))
        return model, {"gates.*": convert}, 1.0
    if style == "bf16":
        model = GatedStyle(dtype=torch.bfloat16, unused=fault == "unused")
        return model, ({"probe": "B T K"} if fault == "unused" else {"gates.*": "B T K"}), 1.0
    if style == "fp16":
        return GatedStyle(out_dtype=torch.float16, classcall=fault == "classcall"), {"gates.*": "B T K"}, 1.0
    if style == "tensors":
        return TensorKinds(), {"gates.*": "B T K"}, 1.0
    raise ValueError(style)


def adapter(style, fault=None):
    model, controllers, identity = build(style, fault)
    model.eval()
    return fca_adapter.HookedAdapter(model, controllers=controllers, identity=identity)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--style", required=True, choices=["mudd", "moe", "twice", "tuple", "bf16", "tensors", "fp16"])
    parser.add_argument("--fault", choices=["unused", "direct", "clamp", "classcall", "inplace"])
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    # Under mpirun each rank starts its own adapter, which learns its place (one GPU per local rank).
    print(f"adapter: rank {fca_adapter.rank()} of {fca_adapter.ranks()}, local rank {fca_adapter.local_rank()}", file=sys.stderr)
    sys.exit(fca_adapter.serve(adapter(args.style, args.fault)))


def mudd_model():
    """For `python3 -m fca_adapter modules --build tests/external/hooked_models.py:mudd_model`."""
    return build("mudd")[0]
