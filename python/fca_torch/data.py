"""fca's data folder from PyTorch (docs/data.md): one raw-bytes file per split, plain
(`train.txt`) or WikiText raw (`wiki.train.raw`) names; byte b is token b. Training windows are
drawn as `fca train` draws them, bit for bit: micro-batch k of step s takes its B start offsets
from Rng(derive_seed(seed, s, k)).below(n - T), so both engines see the same windows.
"""

import hashlib
import os

import numpy as np
import torch

from .rng import Rng, derive_seed


class Split:
    def __init__(self, path: str):
        self.path = path
        self.bytes = np.fromfile(path, dtype=np.uint8)
        self._sha256 = None

    def __len__(self) -> int:
        return int(self.bytes.size)

    def sha256(self) -> str:
        if self._sha256 is None:
            self._sha256 = hashlib.sha256(self.bytes.tobytes()).hexdigest()
        return self._sha256

    def window_count(self, T: int) -> int:
        """Non-overlapping windows of T + 1 bytes, M = floor((n - 1) / T); none is an error."""
        if len(self) < T + 1:
            raise ValueError(f"{self.path}: {len(self)} bytes, too short for one window of {T} + 1 bytes")
        return (len(self) - 1) // T

    def windows_at(self, starts, T: int) -> torch.Tensor:
        """[len(starts), T + 1] int64: inputs are columns 0..T-1, targets 1..T."""
        rows = np.stack([self.bytes[s:s + T + 1] for s in starts])
        return torch.from_numpy(rows.astype(np.int64))

    def evenly_spaced(self, T: int, wanted: int):
        """Start bytes of the N evenly spaced windows k -> floor(k M / N) (all M when N >= M)."""
        M = self.window_count(T)
        N = min(wanted, M)
        return [(k * M // N) * T for k in range(N)]


def open_corpus(folder: str) -> dict:
    """{'train', 'valid', 'test'} -> Split; a split found under neither name is an error naming both."""
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{folder}: data folder does not exist or is not a folder")
    splits = {}
    for name in ("train", "valid", "test"):
        plain, wiki = os.path.join(folder, f"{name}.txt"), os.path.join(folder, f"wiki.{name}.raw")
        if os.path.isfile(plain):
            splits[name] = Split(plain)
        elif os.path.isfile(wiki):
            splits[name] = Split(wiki)
        else:
            raise FileNotFoundError(f"{folder}: split {name} is missing (neither {name}.txt nor wiki.{name}.raw)")
    return splits


def micro_batch(train: Split, seed: int, step: int, k: int, batch: int, T: int) -> torch.Tensor:
    """Micro-batch k of step `step`: [batch, T + 1] windows at fca train's offsets."""
    rng = Rng(derive_seed(seed, step, k))
    return train.windows_at([rng.below(len(train) - T) for _ in range(batch)], T)
