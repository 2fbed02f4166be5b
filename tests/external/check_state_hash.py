"""HookedAdapter's default model hash (fca_adapter.hooks._state_sha256) over every kind of tensor a
third-party model holds, and its refusals.

    check_state_hash.py

Prints one line per check, "ok ..." or "FAILED ...", and exits 1 on any failure.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fca_adapter  # noqa: E402
from fca_adapter.hooks import _state_sha256  # noqa: E402
import hooked_models  # noqa: E402

failures = []


def check(what, ok, detail=""):
    print(("ok " if ok else "FAILED ") + what + ("" if ok else f": {detail}"))
    if not ok:
        failures.append(what)


model = hooked_models.build("tensors")[0]
base = _state_sha256(model)
check("a model with 0-dim, non-contiguous, fp16, bool, integer and tied tensors is hashed", len(base) == 64)
check("the hash is HookedAdapter's model_sha256", hooked_models.adapter("tensors").describe().model_sha256 == base)

# Every tensor kind counts: changing any one of them changes the hash.
with torch.no_grad():
    for name, change in [("the 0-dim scale", lambda m: m.scale.add_(1)),
                         ("the non-contiguous parameter", lambda m: m.mix[0, 1].add_(1)),
                         ("the fp16 buffer", lambda m: m.table.add_(1)),
                         ("the bool buffer", lambda m: m.active.logical_not_()),
                         ("the non-persistent integer buffer", lambda m: m.steps.add_(1)),
                         ("the tied weight", lambda m: m.embed.weight[0, 0].add_(1))]:
        other = hooked_models.build("tensors")[0]
        change(other)
        check(f"changing {name} changes the hash", _state_sha256(other) != base)

# A tied parameter is hashed once, under its first name.
untied = hooked_models.build("tensors")[0]
untied.head.weight = torch.nn.Parameter(untied.embed.weight.detach().clone())
check("a tied parameter is hashed once (untying it adds a tensor)", _state_sha256(untied) != base)


def refused(what, module, part):
    try:
        _state_sha256(module)
        check(f"{what} is refused", False, "no error")
    except fca_adapter.AdapterError as e:
        check(f"{what} is refused with a clear message", part in str(e), str(e))


meta = torch.nn.Linear(4, 4, device="meta")
refused("a meta tensor", meta, "meta device")
sparse = torch.nn.Module()
sparse.register_buffer("indices", torch.eye(3).to_sparse())
refused("a sparse tensor", sparse, "sparse")

print("FAILED: " + ", ".join(failures) if failures else "all checks passed")
sys.exit(1 if failures else 0)
