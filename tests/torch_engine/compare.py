"""Comparisons for tests/torch_engine_test.cpp: fca's engine against fca_torch, the PyTorch engine.

    compare.py logits MODEL TRACE TOL      fca_torch's logits on a trace's tokens vs the trace's (fca's)
    compare.py weights A B TOL [--exclude-key-bias]
                                            every tensor of two checkpoints: max |a - b| / max |a|

Prints the largest difference and exits 1 when it exceeds TOL (with the tensor it came from).
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import fca_adapter  # noqa: E402
import fca_torch  # noqa: E402


def logits(model_path: str, trace_path: str, tol: float) -> int:
    trace, _ = fca_adapter.read_safetensors_file(trace_path)
    model = fca_torch.load(model_path).eval()
    with torch.no_grad():
        ours = model(trace["tokens"].long())
    worst = float((ours - trace["logits"]).abs().max())
    print(f"max |logit difference| {worst:.3g} (largest |logit| {float(trace['logits'].abs().max()):.3g})")
    return 0 if worst <= tol else 1


def weight_files(path: str) -> str:
    return os.path.join(path, "model.safetensors") if os.path.isdir(path) else path


def weights(a_path: str, b_path: str, tol: float, exclude_key_bias: bool) -> int:
    a, meta = fca_adapter.read_safetensors_file(weight_files(a_path))
    b, _ = fca_adapter.read_safetensors_file(weight_files(b_path))
    if sorted(a) != sorted(b):
        print(f"different tensors: {sorted(set(a) ^ set(b))}")
        return 1
    worst, where = 0.0, ""
    for name, x in a.items():
        y = b[name]
        if exclude_key_bias and name.endswith("attn.qkv.bias"):
            # The key bias k_b adds q . k_b to every score of a row, which the softmax removes: its
            # exact gradient is 0, so what either engine computes is rounding noise, which AdamW's
            # m / sqrt(v) scales up to a step of size lr in a random direction.
            D = x.shape[0] // 3
            keep = torch.ones_like(x, dtype=torch.bool)
            keep[D:2 * D] = False
            x, y = x[keep], y[keep]
        scale = float(x.abs().max()) if x.numel() else 0.0
        if scale == 0.0:
            diff = float((x - y).abs().max()) if x.numel() else 0.0
        else:
            diff = float((x - y).abs().max()) / scale
        if diff > worst:
            worst, where = diff, name
    print(f"largest relative weight difference {worst:.3g} ({where or 'none'})")
    return 0 if worst <= tol else 1


def main(argv) -> int:
    if len(argv) >= 4 and argv[0] == "logits":
        return logits(argv[1], argv[2], float(argv[3]))
    if len(argv) >= 4 and argv[0] == "weights":
        return weights(argv[1], argv[2], float(argv[3]), "--exclude-key-bias" in argv[4:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
