"""The counting rules of fca_adapter (counting.py, execution.py) on small cases with known answers,
and the CUDA timer's order of events on a stand-in for torch.cuda (this machine has no GPU).

    check_exec_counting.py

Prints one line per check, "ok ..." or "FAILED ...", and exits 1 on any failure.
"""
import os
import sys
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
from fca_adapter import execution  # noqa: E402
from fca_adapter.counting import OUTSIDE  # noqa: E402
from exec_checks import check, counted, finish  # noqa: E402
from exec_models import opaque_matmul  # noqa: E402



# -- every product's formula against its definition (multiply-adds x 2) ---------------------------
torch.manual_seed(0)
a, b = torch.randn(5, 7), torch.randn(7, 3)
x3, w = torch.randn(2, 5, 7), torch.randn(3, 7)
q = torch.randn(2, 4, 6, 8)
cases = {
    "mm": (lambda: a @ b, 2 * 5 * 7 * 3),
    "addmm (Linear with bias, 2-D)": (lambda: F.linear(a, w, torch.randn(3)), 2 * 5 * 7 * 3),
    "linear over [B, T, D]": (lambda: F.linear(x3, w), 2 * 10 * 7 * 3),
    "bmm through 4-D matmul": (lambda: q @ q.transpose(-1, -2), 2 * 8 * 6 * 8 * 6),
    "baddbmm": (lambda: torch.baddbmm(torch.randn(2, 5, 5), x3, x3.transpose(1, 2)), 2 * 2 * 5 * 7 * 5),
    "einsum": (lambda: torch.einsum("btd,bsd->bts", x3, x3), 2 * 2 * 5 * 7 * 5),
    "mv through matmul": (lambda: x3 @ w[0], 2 * 10 * 7),
    "dot": (lambda: a[0] @ a[1], 2 * 7),
    "conv1d": (lambda: F.conv1d(torch.randn(2, 4, 9), torch.randn(6, 4, 3)), 2 * (2 * 6 * 7) * 4 * 3),
    "conv2d, 2 groups": (lambda: F.conv2d(torch.randn(1, 4, 5, 5), torch.randn(6, 2, 3, 3), groups=2), 2 * (6 * 3 * 3) * 2 * 9),
    "conv_transpose1d": (lambda: F.conv_transpose1d(torch.randn(2, 4, 5), torch.randn(4, 3, 2)), 2 * (2 * 4 * 5) * 3 * 2),
}
for name, (run, expected) in cases.items():
    c = counted(run)
    check(f"{name}: {expected} FLOPs", c["gemm_flops"] == expected and not c["uncounted_ops"],
          f"counted {c['gemm_flops']}, uncounted {c['uncounted_ops']}, ops {c['gemm_ops']}")

# -- element-wise work is listed as 0 by convention; a custom operator is listed as uncounted ------
c = counted(lambda: F.layer_norm(F.gelu(x3) + torch.softmax(x3, -1), (7,)).sum())
check("element-wise, softmax, layer norm and sum: 0 FLOPs, each listed", c["gemm_flops"] == 0 and not c["uncounted_ops"] and
      {"aten.gelu.default", "aten.native_layer_norm.default"} <= set(c["zero_ops"]), c)
c = counted(lambda: opaque_matmul(a, b))
check("a custom operator is uncounted, by name", c["uncounted_ops"] == {"fca_test.opaque_matmul.default": 1} and c["gemm_flops"] == 0, c)

# -- rows, attribution to the innermost module, controllers ---------------------------------------


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 1)

    def forward(self, x):
        return torch.sigmoid(self.proj(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = Gate()
        self.block = nn.Linear(4, 4)

    def forward(self, x):
        g = self.gate(x)
        half = self.block(x[:, : x.shape[1] // 2])        # the block sees half of the tokens
        return torch.cat([half * g[:, : x.shape[1] // 2], x[:, x.shape[1] // 2:]], dim=1) @ torch.ones(4, 4)


net = Net()
x = torch.randn(3, 8, 4)
c = counted(lambda: net(x), net, controllers=["gate"], units={"blocks": ["block"]})
modules = {m["name"]: m for m in c["modules"]}
check("rows: the block saw 3 x 4 of the 3 x 8 token rows", c["units"]["blocks"] == {"modules": 1, "calls": 1, "rows": 12}, c["units"])
check("controller: its subtree's products and calls", c["controller_flops"] == 2 * 24 * 4 and c["controller_evaluations"] == 2, c)
check("a product in the root model's own forward is the root's (\"\"), not outside every module",
      modules[""]["flops"] == 2 * 24 * 4 * 4 and modules[""]["class"] == "Net" and OUTSIDE not in modules and
      c["gemm_flops"] == 2 * 12 * 16 + 2 * 24 * 16, c["modules"])
check("the innermost module gets its products", modules["gate.proj"]["flops"] == 2 * 24 * 4 and modules["gate"]["flops"] == 0, modules)

# -- the CUDA timer on a stand-in: synchronise, record on the model's device's stream, run, record,
# synchronise (a model on cuda:1 while cuda:0 is the current device) ----------------------------
events = []


class FakeStream:
    def __init__(self, device):
        self.device = device


class FakeEvent:
    def __init__(self, enable_timing):
        assert enable_timing

    def record(self, stream=None):
        events.append(("record", None if stream is None else str(stream.device)))

    def elapsed_time(self, end):
        events.append("elapsed")
        return 250.0                                        # milliseconds


fake = types.SimpleNamespace(synchronize=lambda device=None: events.append(("synchronize", str(device))), Event=FakeEvent,
                             current_stream=lambda device=None: FakeStream(device), current_device=lambda: 0)
real = torch.cuda
try:
    torch.cuda = fake
    seconds = execution.time_call(lambda: events.append("run"), torch.device("cuda", 1))
finally:
    torch.cuda = real
check("CUDA timing: synchronised, events on the model's device's stream around the pass, milliseconds to seconds",
      events == [("synchronize", "cuda:1"), ("record", "cuda:1"), "run", ("record", "cuda:1"), ("synchronize", "cuda:1"),
                 "elapsed"] and seconds == 0.25, (events, seconds))
check("the CPU timer is perf_counter", execution._timer_name(torch.device("cpu")) == "perf_counter" and
      execution._timer_name(torch.device("cuda", 0)) == "cuda_events")

check("glibc's malloc thresholds are fixed before an exec's passes", execution.fix_malloc_thresholds())

# -- a hand-written adapter's timed pass is its run(), without forward()'s record and host copy ----
import fca_adapter  # noqa: E402
import numpy as np  # noqa: E402


class HandWritten(fca_adapter.Adapter):
    def __init__(self):
        super().__init__()
        self.model = nn.Linear(4, 256)
        self.calls = {"forward": 0, "run": 0}

    def describe(self):
        return fca_adapter.Description(family="t", description="t", model_sha256="0" * 64, vocab=256, max_tokens=8, layers=1)

    def forward(self, ids, coefficients=None):
        self.calls["forward"] += 1
        self.count_controller()
        B, T = ids.shape
        return self.run(ids, coefficients), torch.ones(B, 1, T, 1, 1)

    def run(self, ids, coefficients=None):
        self.calls["run"] += 1
        return self.model(F.one_hot(ids % 4, 4).float())


hand = HandWritten()
session = execution.ExecSession(hand, hand.describe())
ids = np.zeros((2, 8), dtype=np.int32)
prepared = session.prepare(ids, ids)
hand.calls = {"forward": 0, "run": 0}
session.time_pass("live")
check("a hand-written adapter's timed pass calls run(), not forward() (no record, no host copy)",
      hand.calls == {"forward": 0, "run": 1} and prepared["timed_pass"] == "run(ids, coefficients)", (hand.calls, prepared["timed_pass"]))

finish()
