"""What the exec counter's check scripts share (check_exec_counting.py, check_exec_unseen.py): one
line per check, "ok ..." or "FAILED ...", a counted pass, and the exit status."""
import sys

import torch

from fca_adapter.counting import count_pass

failures = []


def check(what, ok, detail=""):
    print(("ok " if ok else "FAILED ") + what + ("" if ok else f": {detail}"))
    if not ok:
        failures.append(what)


def counted(run, model=None, controllers=(), units=None):
    """The counts document of one pass of run() over `model` (no module replayed)."""
    with torch.inference_mode():
        return count_pass(run, {"": model} if model is not None else {}, list(controllers), lambda m: False, units or {})[1]


def finish():
    print("FAILED: " + ", ".join(failures) if failures else "all checks passed")
    sys.exit(1 if failures else 0)
