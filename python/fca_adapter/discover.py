"""Discovery: which modules of a model could be its controller.

    python3 -m fca_adapter modules --build FILE.py:FUNCTION [--tokens T] [--vocab V]

FUNCTION() returns the model, or (model, forward) with forward(ids) -> logits. One forward pass on
each of two different batches of random ids (2 windows of T tokens) runs with a hook on every
module; each module is listed with its class, its output shapes, how many times it ran per pass,
and whether its output changed with the input: the candidates for `controllers` are the modules
whose output varies and whose shape has the window and token axes (B = 2, T).
"""

import argparse
import importlib.util
import os
import sys
from typing import Dict, List

import torch

from .execution import logits_of
from .hooks import _max_tokens_of


def _shapes(output) -> List[List[int]]:
    if isinstance(output, torch.Tensor):
        return [list(output.shape)]
    if isinstance(output, (tuple, list)):
        return [s for o in output for s in _shapes(o)]
    if hasattr(output, "logits"):
        return _shapes(output.logits)
    return []


def _tensors(output) -> List[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output.detach().float().cpu()]
    if isinstance(output, (tuple, list)):
        return [t for o in output for t in _tensors(o)]
    return []


def list_modules(model: torch.nn.Module, forward, tokens: int, vocab: int) -> List[Dict]:
    records: Dict[str, List] = {}
    handles = []
    for name, module in model.named_modules():
        if not name:
            continue
        def hook(module, inputs, output, name=name):
            records.setdefault(name, []).append(output)
        handles.append(module.register_forward_hook(hook))
    passes = []
    generator = torch.Generator().manual_seed(0)
    device = next(iter(model.parameters()), torch.empty(0)).device
    try:
        with torch.inference_mode():
            for _ in range(2):
                records.clear()
                ids = torch.randint(0, vocab, (2, tokens), generator=generator).to(device)
                logits_of(forward(ids))
                passes.append({n: list(outs) for n, outs in records.items()})
    finally:
        for h in handles:
            h.remove()
    rows = []
    for name, module in model.named_modules():
        if not name or name not in passes[0]:
            continue
        first, second = passes[0][name], passes[1].get(name, [])
        a = [t for o in first for t in _tensors(o)]
        b = [t for o in second for t in _tensors(o)]
        varies = len(a) != len(b) or any(x.shape != y.shape or not torch.equal(x, y) for x, y in zip(a, b))
        rows.append({"name": name, "class": type(module).__name__, "calls": len(first),
                     "shapes": _shapes(first[0]), "varies": varies})
    return rows


def _load(build: str):
    path, _, function = build.rpartition(":")
    if not path or not function:
        raise SystemExit(f"--build {build!r}: expected FILE.py:FUNCTION")
    if not os.path.isfile(path):
        raise SystemExit(f"--build {build!r}: {path} is not a file")
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location("fca_user_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, function):
        raise SystemExit(f"--build {build!r}: {path} defines no {function}()")
    built = getattr(module, function)()
    model, forward = built if isinstance(built, tuple) else (built, None)
    return model, forward or (lambda ids: model(ids))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m fca_adapter", description="fca_adapter tools")
    sub = parser.add_subparsers(dest="command", required=True)
    modules = sub.add_parser("modules", help="list a model's modules, their output shapes, and whether they vary")
    modules.add_argument("--build", required=True, help="FILE.py:FUNCTION returning the model, or (model, forward)")
    modules.add_argument("--tokens", type=int, default=0, help="window length (default: the model's, at most 16)")
    modules.add_argument("--vocab", type=int, default=256, help="ids are drawn from [0, vocab)")
    args = parser.parse_args(argv)
    model, forward = _load(args.build)
    model.eval()
    tokens = args.tokens or min(_max_tokens_of(model) or 16, 16)
    rows = list_modules(model, forward, tokens, args.vocab)
    print(f"{type(model).__name__}: {len(rows)} modules ran; 2 windows of {tokens} tokens (B = 2, T = {tokens})")
    print(f"{'module':<40} {'class':<18} {'calls':>5}  {'varies':<6}  output shapes")
    for r in rows:
        print(f"{r['name']:<40} {r['class']:<18} {r['calls']:>5}  {'yes' if r['varies'] else 'no':<6}  "
              f"{' '.join(str(s) for s in r['shapes'])}")
    return 0
