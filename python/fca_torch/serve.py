"""Serve an fca checkpoint's PyTorch model to `fca audit --external` / `fca exec --external`:

    fca audit --external "python3 -m fca_torch.serve --model runs/fg.safetensors" --data DIR --out audits/fg

The model runs on its own device (--device: cuda when present, else cpu) through the built-in
hooked adapter (the model's `hooked_adapter`): no code of the user's. --reference names exec's
latency reference: a checkpoint of the same family (Dense for the gated family).
"""

import argparse
import os
import sys

import torch

import fca_adapter

from . import load, model_files
from .gated import GatedTransformer, make_config as gated_config


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m fca_torch.serve", allow_abbrev=False)
    p.add_argument("--model", required=True, help="an fca-gated-v1 file or a MUDD folder")
    p.add_argument("--reference", help="fca exec's reference: a checkpoint, or same-shape-dense (the Dense gated model of "
                                       "the model's layers, width, heads and positions, initialised weights: native exec's reference)")
    p.add_argument("--device", default="auto", help="auto (cuda:<local rank> when a GPU is present), cpu, cuda:N")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    return p.parse_args(argv)


def device_of(arg: str) -> torch.device:
    if arg == "auto":
        if torch.cuda.is_available():
            return torch.device(f"cuda:{fca_adapter.local_rank() % torch.cuda.device_count()}")
        return torch.device("cpu")
    return torch.device(arg)


SAME_SHAPE_DENSE = "same-shape-dense"


def same_shape_dense(model) -> GatedTransformer:
    """The reference of fca's native exec for every family (dense_same_shape): the Dense gated model
    of the model's layers, width, heads and positions, with initialised weights (its latency and
    FLOPs are what count, not its predictions)."""
    dense = GatedTransformer(gated_config(model.L, model.D, model.H, model.seq_len, "dense"))
    dense.initialize(1)
    return dense


def adapter_for(model_path: str, reference_path=None, device=torch.device("cpu")):
    model = load(model_path).to(device).eval()
    reference = None
    if reference_path:
        ref = (same_shape_dense(model) if reference_path == SAME_SHAPE_DENSE else load(reference_path)).to(device).eval()
        label = {"dense": "Dense"}.get(ref.label(), ref.label())
        reference = fca_adapter.Reference(label, forward=lambda ids: ref(ids), model=ref)
    # Named by its checkpoint, so that a study's seeds and variants keep rows of their own.
    return model.hooked_adapter(model_files(model_path), reference=reference,
                                name=os.path.basename(os.path.normpath(model_path)))


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    # Deterministic kernels, so that a replay repeats the live pass's arithmetic (exact replay). On
    # CUDA, cuBLAS needs a fixed workspace for that, set before its first handle is made.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    return fca_adapter.serve(adapter_for(a.model, a.reference, device_of(a.device)))


if __name__ == "__main__":
    sys.exit(main())
