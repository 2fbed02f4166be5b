"""fca's checkpoint files from PyTorch: safetensors written as fca writes them (F32, row-major, to a
temporary name renamed into place) and read through fca_adapter's checked reader.

A checkpoint written here loads in fca (`fca eval --model`, `fca audit --model`, `fca train
--resume`) and one written by fca loads here; docs/checkpoint-format.md is the contract.
"""

import functools
import json
import os
import subprocess
from typing import Dict, Mapping, Tuple

import torch

from fca_adapter import encode_safetensors, read_safetensors_file

__all__ = ["read_tensors", "write_tensors", "write_text", "config_text", "VERSION"]

VERSION = "fca_torch 0.1.0"


@functools.lru_cache(maxsize=None)
def git_commit() -> str:
    """The commit of the source tree this package runs from ("-dirty" with local changes), or
    "unknown" for an installed copy outside a git checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        commit = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return commit.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def version_string() -> str:
    """The writer, as every file's metadata records it (fca's files say "fca <version> (commit <c>)")."""
    return f"{VERSION} (commit {git_commit()})"


def read_tensors(path: str) -> Tuple[Dict[str, torch.Tensor], Dict[str, str]]:
    """(name -> float32 tensor, metadata) of a safetensors file; a missing file is named."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such checkpoint file")
    return read_safetensors_file(path)


def write_tensors(path: str, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> None:
    """Every tensor as F32 in the order given, to <path>.tmp.<pid> then renamed over <path>."""
    arrays = {name: t.detach().to("cpu", torch.float32).contiguous().numpy().astype("<f4", copy=False)
              for name, t in tensors.items()}
    blob = encode_safetensors(arrays, {str(k): str(v) for k, v in metadata.items()})
    _write_atomically(path, blob)


def write_text(path: str, text: str) -> None:
    _write_atomically(path, text.encode("utf-8"))


def _write_atomically(path: str, blob: bytes) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def config_text(config: Mapping) -> str:
    """A config as fca's writers dump it: compact JSON, fields in the order given."""
    return json.dumps(dict(config), separators=(",", ":"))
