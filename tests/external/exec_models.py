"""Small models whose execution `fca exec --external` must show as it is: the tests' check that the
executed work, the FLOPs and the uncounted operators come from what ran, not from what a model
claims. Byte-level, vocab 256, 16 positions, random weights of a fixed seed, built from
hooked_models.py's pieces.

    exec_models.py --style STYLE [--die-after N]

Styles:
  routed        top-2 of 4 experts per token: each expert runs on the rows routed to it
  masked        the same router, written with dense masking: every expert runs on every token and its
                output is multiplied by the routing weight (0 where it was not chosen)
  skip          a Mixture-of-Depths-style block that runs on the top half of each window's tokens only
  zero          the same block run on every token, its update multiplied by 0 where "skipped"
  opaque        a block whose product runs in a custom operator with no FLOP formula, called from a
                custom autograd Function (and a second Function doing torch.mm, which is counted)
  numpy         the routed experts' products run in numpy: no operator of PyTorch sees them
  inexact       the routed model whose replay adds 1e-4 to the logits: a replay that is not exact

--reference dense: the Dense model of the same blocks without the MoE layers as the reference (it
has no experts: they count 0 for it, with the reason).

Every style names its units: blocks `blocks.*` (and the MoD block `mod`), experts `moe.*.experts.*`.
"""

import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fca_adapter  # noqa: E402
from hooked_models import D, Base, Block, MoeLayer, MoeStyle  # noqa: E402

EXPERTS, TOP_K = 4, 2


class MaskedMoeLayer(MoeLayer):
    """hooked_models' router and experts, written with dense masking: every expert runs on every
    token and its output is multiplied by its routing weight (0 where it was not chosen)."""

    def forward(self, x):
        B, T, _ = x.shape
        flat = x.reshape(B * T, D)
        weights, index = F.softmax(self.router(flat), dim=-1).topk(TOP_K, dim=-1)     # [N, k]
        dense = torch.zeros(B * T, EXPERTS).scatter(1, index, weights)                 # [N, E], 0 where not chosen
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            out = out + dense[:, e, None] * expert(flat)
        return out.reshape(B, T, D)


class NumpyLinear(nn.Linear):
    """nn.Linear whose product runs in numpy, outside PyTorch's dispatcher."""

    def forward(self, x):
        return torch.from_numpy(x.detach().numpy() @ self.weight.detach().numpy().T) + self.bias


class DenseStyle(Base):
    """The Dense reference of the MoE styles: the same kind of blocks, no MoE layers, no experts."""

    def forward(self, ids):
        x = self.embed_ids(ids)
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def moe_model(masked: bool, in_numpy: bool = False) -> MoeStyle:
    """hooked_models' MoE style (top-2 of 4 experts, each run on the rows routed to it), or the same
    weights' layers written with dense masking."""
    model = MoeStyle()
    if masked:
        for l, layer in enumerate(model.moe):
            masked_layer = MaskedMoeLayer()
            masked_layer.load_state_dict(layer.state_dict())
            model.moe[l] = masked_layer
    if in_numpy:
        for layer in model.moe:
            for e, expert in enumerate(layer.experts):
                layer.experts[e] = NumpyLinear(D, D)
                layer.experts[e].load_state_dict(expert.state_dict())
    return model


class ModModel(Base):
    """Three blocks, then a routed block `mod` over the top half of each window's tokens by a
    router's score; `zero`: the routed block runs on every token and its update is multiplied by 0
    where the token was not selected."""

    def __init__(self, zero: bool):
        super().__init__()
        self.router = nn.Linear(D, 1)
        self.mod = Block()
        self.zero = zero

    def forward(self, ids):
        x = self.embed_ids(ids)
        for block in self.blocks:
            x = x + block(x)
        B, T, _ = x.shape
        score = torch.sigmoid(self.router(x))[..., 0]                          # [B, T]
        top = score.topk(T // 2, dim=-1).indices                               # [B, T/2]
        if self.zero:
            keep = torch.zeros(B, T).scatter(1, top, 1.0)
            x = x + (keep * score)[..., None] * self.mod(x)
        else:
            rows = torch.gather(x, 1, top[..., None].expand(B, T // 2, D))      # [B, T/2, D]
            update = torch.gather(score, 1, top)[..., None] * self.mod(rows)
            x = x.scatter_add(1, top[..., None].expand(B, T // 2, D), update)
        return self.head(x)


_LIBRARY = None


def opaque_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b in a custom operator fca_test::opaque_matmul (numpy inside): no FLOP formula exists."""
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library("fca_test", "DEF")
        _LIBRARY.define("opaque_matmul(Tensor a, Tensor b) -> Tensor")
        _LIBRARY.impl("opaque_matmul", lambda x, y: torch.from_numpy(x.contiguous().numpy() @ y.contiguous().numpy()), "CPU")
    return torch.ops.fca_test.opaque_matmul(a, b)


class OpaqueProduct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        return opaque_matmul(x.reshape(-1, x.shape[-1]), w).reshape(*x.shape[:-1], w.shape[1])


class PlainProduct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        return torch.mm(x.reshape(-1, x.shape[-1]), w).reshape(*x.shape[:-1], w.shape[1])


class OpaqueModel(Base):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(D, 1)
        self.w_opaque = nn.Parameter(torch.randn(D, D) * 0.1)
        self.w_plain = nn.Parameter(torch.randn(D, D) * 0.1)

    def forward(self, ids):
        x = self.embed_ids(ids)
        for block in self.blocks:
            x = x + torch.sigmoid(self.gate(x)) * block(x)
        x = x + OpaqueProduct.apply(x, self.w_opaque) + PlainProduct.apply(x, self.w_plain)
        return self.head(x)


def build(style: str):
    """(model, controllers, executed) of a style."""
    torch.manual_seed({"routed": 11, "masked": 11, "numpy": 11, "inexact": 11, "skip": 12, "zero": 12, "opaque": 13}[style])
    experts = {"blocks": "blocks.*", "experts": "moe.*.experts.*"}
    if style in ("routed", "masked", "numpy", "inexact"):
        return moe_model(masked=style == "masked", in_numpy=style == "numpy"), {"moe.*.router": "(B T) K"}, experts
    if style in ("skip", "zero"):
        return ModModel(zero=style == "zero"), {"router": "B T K"}, {"blocks": ["blocks.*", "mod"]}
    if style == "opaque":
        return OpaqueModel(), {"gate": "B T K"}, {"blocks": "blocks.*"}
    raise ValueError(style)


class DyingAdapter(fca_adapter.HookedAdapter):
    """Exits abruptly (status 3, no answer) at its n-th exec pass: an adapter that dies mid-run."""

    def __init__(self, *args, die_after: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.passes_left = die_after

    def exec_forward(self, ids, handed):
        self.passes_left -= 1
        if self.passes_left == 0:
            os._exit(3)
        return super().exec_forward(ids, handed)


class InexactAdapter(fca_adapter.HookedAdapter):
    """Its replay's logits are 1e-4 off the live pass's: exec must refuse to time it."""

    def exec_forward(self, ids, handed):
        logits = super().exec_forward(ids, handed)
        return logits if handed is None else logits + 1e-4


def dense_reference() -> fca_adapter.Reference:
    torch.manual_seed(11)
    dense = DenseStyle().eval()
    return fca_adapter.Reference("Dense", lambda ids: dense(ids), dense)


def adapter(style: str, die_after: int = 0, reference: str = "") -> fca_adapter.HookedAdapter:
    model, controllers, executed = build(style)
    model.eval()
    kind, extra = (DyingAdapter, {"die_after": die_after}) if die_after else (fca_adapter.HookedAdapter, {})
    if style == "inexact":
        kind = InexactAdapter
    if reference == "dense":
        extra["reference"] = dense_reference()
    return kind(model, controllers=controllers, executed=executed, description=f"exec test model {style}", **extra)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--style", required=True, choices=["routed", "masked", "skip", "zero", "opaque", "numpy", "inexact"])
    parser.add_argument("--reference", default="", choices=["", "dense"], help="dense: the Dense model of the same blocks as the reference")
    parser.add_argument("--die-after", type=int, default=0, help="exit abruptly at the n-th exec pass (a test of fca's errors)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    sys.exit(fca_adapter.serve(adapter(args.style, args.die_after, args.reference)))
