"""fca's PyTorch engine: the paper's models (the gated family and MUDD) as trainable PyTorch
modules that read and write fca's checkpoints, a trainer that runs under torchrun (DDP, one process
per GPU), and the hooked adapter that lets `fca audit --external` / `fca exec --external` audit them
on their own device. docs/torch-engine.md says how to use it and what it guarantees.
"""

import os

from .gated import GatedTransformer
from .mudd import Mudd

__all__ = ["GatedTransformer", "Mudd", "load", "model_files"]


def load(path: str):
    """A checkpoint of either family: an fca-gated-v1 file, or a MUDD folder."""
    if os.path.isdir(path):
        return Mudd.load(path)
    return GatedTransformer.load(path)


def model_files(path: str):
    """The files whose bytes are the model (what fca hashes as model_sha256)."""
    if os.path.isdir(path):
        from .mudd import weight_files
        return weight_files(path)
    return [path]
