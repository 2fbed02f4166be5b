"""What fca_adapter's exec counter must never count as 0 without a trace (counting.py), each case
built to break it: products outside the dispatcher, products written as multiply-then-sum, fused
paths, operators that had no formula, rows taken from the wrong argument, the root model against
"outside every module", units that ran products on no rows, and the agreement with PyTorch's own
profiler on the test models.

    check_exec_unseen.py

Prints one line per check, "ok ..." or "FAILED ...", and exits 1 on any failure.
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
from fca_adapter import execution  # noqa: E402
from fca_adapter.counting import OUTSIDE  # noqa: E402
from exec_checks import check, counted, finish  # noqa: E402
from fca_adapter.errors import AdapterError  # noqa: E402



def unseen(c, kind=None):
    return [u for u in c["unseen_work"] if kind is None or u["kind"] == kind]


torch.manual_seed(0)
D = 8

# -- formulas: in-place names and the operators that had none --------------------------------------
a, b = torch.randn(5, 7), torch.randn(7, 3)
b1, b2 = torch.randn(2, 5, 7), torch.randn(2, 7, 3)
cases = {
    "addmm_ (in place)": (lambda: torch.zeros(5, 3).addmm_(a, b), 2 * 5 * 7 * 3),
    "baddbmm_ (in place)": (lambda: torch.zeros(2, 5, 3).baddbmm_(b1, b2), 2 * 2 * 5 * 7 * 3),
    "addbmm": (lambda: torch.addbmm(torch.zeros(5, 3), b1, b2), 2 * 2 * 5 * 7 * 3),
    "addr": (lambda: torch.addr(torch.zeros(5, 3), torch.randn(5), torch.randn(3)), 2 * 5 * 3),
    "F.bilinear (_trilinear)": (lambda: F.bilinear(torch.randn(4, 3), torch.randn(4, 5), torch.randn(6, 3, 5)), 2 * 4 * 6 * 3 * 5),
    "cdist p=1 (_cdist_forward)": (lambda: torch.cdist(torch.randn(2, 5, 3), torch.randn(2, 4, 3), p=1.0), 2 * 2 * 5 * 4 * 3),
}
for name, (run, expected) in cases.items():
    c = counted(run)
    check(f"{name}: {expected} FLOPs", c["gemm_flops"] == expected and not c["uncounted_ops"],
          f"counted {c['gemm_flops']}, uncounted {c['uncounted_ops']}, ops {c['gemm_ops']}")

# -- the fused paths of nn.MultiheadAttention and nn.TransformerEncoderLayer -----------------------
# In eval under inference_mode PyTorch runs each as one fused operator (its inner modules' hooks
# never fire); in training mode (dropout 0) as linear and bmm operators. Both count the same.
B, T, H, FF = 2, 6, 2, 16
x = torch.randn(B, T, D)
mha = nn.MultiheadAttention(D, H, dropout=0.0, batch_first=True)
enc = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True)
mha_flops = 2 * B * D * D * 3 * T + 4 * B * T * T * D + 2 * B * T * D * D
for label, module, run, expected, fused in (
        ("MultiheadAttention", mha, lambda: mha(x, x, x, need_weights=False)[0], mha_flops, "aten._native_multi_head_attention.default"),
        ("TransformerEncoderLayer", enc, lambda: enc(x), mha_flops + 4 * B * T * D * FF, "aten._transformer_encoder_layer_fwd.default")):
    module.eval()
    fast = counted(run, module)
    module.train()
    slow = counted(run, module)
    module.eval()
    check(f"{label}: its fused path has a formula, equal to its unfused path's count ({expected} FLOPs)",
          fused in fast["gemm_ops"] and fast["gemm_flops"] == slow["gemm_flops"] == expected and not fast["uncounted_ops"]
          and not fast["unseen_work"], (fast["gemm_ops"], slow["gemm_flops"], fast["uncounted_ops"], fast["unseen_work"]))

# -- harmless operators are 0 by convention, never "uncounted" --------------------------------------
ids = torch.tensor([3, 1, 3, 2])
harmless = lambda: (F.pad(a, (1, 1)), torch.view_as_real(torch.view_as_complex(torch.randn(4, 2))), torch.unique(ids),
                    torch.searchsorted(torch.arange(5.0), torch.tensor([1.5])), a.index_fill(0, ids[:1], 0.0),
                    torch.bincount(ids), torch.ops.aten.unsafe_split(a, 2))
c = counted(harmless)
check("padding, complex views, unique, searchsorted, index_fill, bincount, unsafe_split: 0 by convention",
      not c["uncounted_ops"] and not c["unseen_work"], c["uncounted_ops"])


# -- work outside the dispatcher, and products written as multiply-then-sum ---------------------
class NumpyExpert(nn.Module):
    """An expert whose product runs in numpy: no operator of PyTorch sees it."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(D, D))

    def forward(self, x):
        return torch.from_numpy(x.detach().numpy() @ self.weight.detach().numpy())


class SumRouter(nn.Module):
    """A router written as (x[:, None, :] * w).sum(-1): a product PyTorch runs as mul and sum."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, D))

    def forward(self, x):
        return (x[..., None, :] * self.w).sum(-1)


def sum_attention(q, k):          # (q[..., None, :] * k[..., None, :, :]).sum(-1): QK^T as multiply-then-sum
    return (q[..., :, None, :] * k[..., None, :, :]).sum(-1)


x2 = torch.randn(6, D)
numpy_expert = NumpyExpert()
c = counted(lambda: numpy_expert(x2), numpy_expert)
check("an expert in numpy: its weight is unseen work (0 FLOPs, no operator uncounted)",
      c["gemm_flops"] == 0 and [u["what"].split()[0] for u in unseen(c, "parameter")] == ["weight"], c["unseen_work"])
router = SumRouter()
c = counted(lambda: router(x2), router)
check("a router (x * w).sum(-1): its weight and the multiply-then-sum are unseen work",
      {u["kind"] for u in c["unseen_work"]} == {"parameter", "multiply_then_sum"}, c["unseen_work"])
q = torch.randn(2, 5, D)
c = counted(lambda: sum_attention(q, q))
check("attention scores as multiply-then-sum: unseen work, outside every module",
      [(u["kind"], u["module"]) for u in c["unseen_work"]] == [("multiply_then_sum", OUTSIDE)], c["unseen_work"])
c = counted(lambda: torch.cos(torch.arange(5.0)[:, None] * torch.arange(3.0)[None, :]))
check("an outer product that is not summed (rotary angles) is not unseen work", not c["unseen_work"], c["unseen_work"])


class Tables(nn.Module):
    """An embedding and a positional table added to it, then a Linear: nothing unseen."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, D)
        self.pos = nn.Parameter(torch.randn(8, D))
        self.out = nn.Linear(D, 16)

    def forward(self, ids):
        return self.out(self.embed(ids) + self.pos[: ids.shape[1]])


tables = Tables()
c = counted(lambda: tables(torch.randint(0, 16, (2, 5))), tables)
check("embedding and positional tables read, a Linear counted: nothing unseen", not c["unseen_work"], c["unseen_work"])

# -- rows from the argument that matches the output; the root against "outside" ------------------


class MaskedBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, D)

    def forward(self, mask, x):               # mask [B, T], x [B, T, D]
        return self.lin(x) * mask[..., None]


class Root(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = MaskedBlock()
        self.w = nn.Parameter(torch.randn(D, D))

    def forward(self, x):
        return self.block(torch.ones(x.shape[:2]), x) @ self.w     # a product in the root's own forward


root, x = Root(), torch.randn(3, 4, D)
outside_w = torch.randn(D, D)
c = counted(lambda: root(x) @ outside_w, root, units={"blocks": ["block"]})
modules = {m["name"]: m for m in c["modules"]}
check("rows of b(mask [B, T], x [B, T, D]) come from x: 12", c["units"]["blocks"]["rows"] == 12, c["units"])
check("the root's own product is the root's, a product after the model returned is outside every module",
      modules[""]["flops"] == 2 * 12 * D * D and modules[OUTSIDE]["flops"] == 2 * 12 * D * D and
      modules[""]["class"] == "Root", modules)


class Sink(nn.Module):
    """A unit that takes its input by keyword and writes its result into a buffer: products, 0 rows."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, D)

    def forward(self, *, x, out):
        out.copy_(self.lin(x))


sink = Sink()
c = counted(lambda: sink(x=x2, out=torch.empty(6, D)), nn.ModuleDict({"sink": sink}), units={"blocks": ["sink"]})
check("a unit with products and 0 rows is reported", any("0 rows" in w for w in c["unit_warnings"]), c["unit_warnings"])
expert = NumpyExpert()
wrapper = nn.ModuleDict({"e": expert})
c = counted(lambda: expert(x2), wrapper, units={"experts": ["e"]})
check("a unit with rows and no counted product is reported", any("no counted product" in w for w in c["unit_warnings"]),
      c["unit_warnings"])
try:
    execution.units_of(nn.Sequential(nn.Sequential(nn.Linear(2, 2))), {"blocks": "**"})
    check("nested unit matches are refused", False, "no error")
except AdapterError as e:
    check("nested unit matches are refused", "inside" in str(e) and "blocks" in str(e), str(e))

# -- PyTorch's own profiler counts the same products on the test models -------------------------
from exec_models import build  # noqa: E402


def profiler_flops(run) -> int:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_flops=True) as prof:
        run()
    return sum(int(e.flops or 0) for e in prof.events() if e.name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"))


import hooked_models  # noqa: E402

models = {style: build(style)[0] for style in ("routed", "masked", "skip", "zero")}
models.update({f"hooked {style}": hooked_models.build(style)[0] for style in ("mudd", "moe", "twice", "tuple", "tensors")})
for style, model in models.items():
    model.eval()
    ids = torch.randint(0, 256, (2, 16))
    with torch.inference_mode():
        ours = counted(lambda: model(ids), model)
        theirs = profiler_flops(lambda: model(ids))
    total = ours["gemm_flops"] + ours["controller_flops"]
    check(f"{style}: FLOPs equal torch.profiler's mm/addmm/bmm/baddbmm count within 0.5% ({total} against {theirs})",
          theirs > 0 and abs(total - theirs) <= 0.005 * theirs and not ours["uncounted_ops"] and not ours["unseen_work"],
          (total, theirs, ours["uncounted_ops"], ours["unseen_work"]))

finish()
