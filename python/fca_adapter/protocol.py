"""fca's external-model adapter: audit a PyTorch model with `fca audit --external "<command>"`.

fca owns the windows, the coefficient cache, the conditions, the statistics, the verdict and the
report. Your model only has to run a batch of token windows live (recording its controller's
coefficients) and run it again with coefficients it is handed. Subclass `Adapter`:

    import fca_adapter

    class MyAdapter(fca_adapter.Adapter):
        def describe(self):
            return fca_adapter.Description(family="mymodel", description="...", model_sha256=...,
                                           vocab=256, max_tokens=256, layers=L, streams=1, sources=1,
                                           identity=torch.ones(L, 1, 1), static_profile="LayerMean",
                                           structure_removed="GlobalMean")
        def forward(self, ids, coefficients=None):
            # ids: int64 [B, T]. coefficients: None (live: run the controller, record what it gives)
            # or float32 [B, L, T, S, K] (replay: use exactly these, never call the controller).
            return logits, recorded          # float32 [B, T, V], float32 [B, L, T, S, K]

    if __name__ == "__main__":
        fca_adapter.main(lambda args: MyAdapter(args.model))

The protocol (docs/external-protocol.md, version fca-external-v1): fca starts this program as a
child process and writes requests to its stdin; each request and each answer is one message, an
8-byte little-endian length followed by that many bytes of a safetensors document whose
`__metadata__` holds "protocol" and "type". Nothing else may be written to stdout: `serve` moves
sys.stdout to stderr so that a stray print cannot corrupt the stream.

Python 3 with numpy and torch only.
"""

import argparse
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import struct
import sys
import traceback
from typing import BinaryIO, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F

from .errors import AdapterError
from .execution import answer as exec_answer, units_of

PROTOCOL = "fca-external-v1"
# Largest message accepted (a guard against a corrupt length prefix): 4 GiB.
MAX_MESSAGE_BYTES = 1 << 32
RECORD_KINDS = ("continuous", "expert_routing", "token_selection")
COEFFICIENT_DTYPES = ("F32", "F64", "BF16", "F16")

# ------------------------------------------------------------------------------------------------
# safetensors in memory: u64 little-endian header length N, N bytes of JSON header
# {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {str: str}}, then the data.

_DTYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "I32": np.dtype("<i4"),
           "I64": np.dtype("<i8"), "U8": np.dtype("u1"), "F16": np.dtype("<f2")}
_NAMES = {v: k for k, v in _DTYPES.items()}


def encode_safetensors(tensors: Dict[str, np.ndarray], metadata: Dict[str, str]) -> bytes:
    """One safetensors document; tensors in the order given, data 8-byte aligned."""
    header: Dict[str, object] = {"__metadata__": {str(k): str(v) for k, v in metadata.items()}}
    chunks: List[bytes] = []
    offset = 0
    for name, array in tensors.items():
        array = np.ascontiguousarray(array)
        dtype = array.dtype.newbyteorder("<") if array.dtype.itemsize > 1 else array.dtype
        if dtype not in _NAMES:
            raise ValueError(f"tensor {name}: dtype {array.dtype} cannot be sent (F32, F64, I32, I64, U8)")
        raw = array.astype(dtype, copy=False).tobytes()
        header[name] = {"dtype": _NAMES[dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)
    return b"".join([struct.pack("<Q", len(text)), text] + chunks)


def decode_safetensors(blob: bytes, where: str = "message") -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """(name -> array, metadata); every size and offset checked against the buffer."""
    if len(blob) < 8:
        raise ValueError(f"{where}: {len(blob)} bytes, too short for a safetensors header")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise ValueError(f"{where}: header length {n} runs past the {len(blob)} bytes")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError(f"{where}: header is not a JSON object")
    metadata = header.pop("__metadata__", {}) or {}
    data = memoryview(blob)[8 + n:]
    tensors = {}
    for name, entry in header.items():
        dtype = _DTYPES.get(entry.get("dtype"))
        if dtype is None:
            raise ValueError(f"{where}: tensor {name}: dtype {entry.get('dtype')!r} not supported")
        shape = [int(d) for d in entry["shape"]]
        begin, end = (int(o) for o in entry["data_offsets"])
        if not 0 <= begin <= end <= len(data) or end - begin != math.prod(shape) * dtype.itemsize:
            raise ValueError(f"{where}: tensor {name}: offsets [{begin}, {end}) do not hold shape {shape} "
                             f"{entry['dtype']} inside {len(data)} data bytes")
        tensors[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape)
    return tensors, metadata


def read_safetensors_file(path: str) -> Tuple[Dict[str, torch.Tensor], Dict[str, str]]:
    """A safetensors file's tensors as torch tensors (F32, F64, I32, I64, F16, BF16 -> float32)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8]) if len(blob) >= 8 else (len(blob),)
    if len(blob) < 8 or n > len(blob) - 8:
        raise ValueError(f"{path}: not a safetensors file (truncated header)")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {}) or {}
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, entry in header.items():
        begin, end = (int(o) for o in entry["data_offsets"])
        shape = [int(d) for d in entry["shape"]]
        if entry["dtype"] == "BF16":   # bf16 is the top half of a float32
            half = np.frombuffer(data[begin:end], dtype="<u2").astype(np.uint32) << 16
            out[name] = torch.from_numpy(half.view(np.float32).reshape(shape)).clone()
            continue
        dtype = _DTYPES.get(entry["dtype"])
        if dtype is None or end - begin != math.prod(shape) * dtype.itemsize:
            raise ValueError(f"{path}: tensor {name}: dtype {entry['dtype']} or size does not match its shape {shape}")
        array = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape)
        native = np.float32 if entry["dtype"] == "F16" else dtype.newbyteorder("=")   # f16 -> f32 is exact
        # Cloned into torch's allocator, which aligns to 64 bytes: numpy's copies are 16-byte aligned,
        # and weights at such addresses left PyTorch's products in a slow state for the model's whole
        # life in some processes (docs/audit-your-model.md, claim 3: measured).
        out[name] = torch.from_numpy(array.astype(native, copy=True)).clone()
    return out, metadata


def sha256_files(paths: Sequence[str]) -> str:
    """SHA-256 (hex) of one file, or of the concatenated per-file digests of several (sorted)."""
    digests = []
    for path in sorted(paths):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        digests.append(h.hexdigest())
    if len(digests) == 1:
        return digests[0]
    return hashlib.sha256("".join(digests).encode()).hexdigest()


# ------------------------------------------------------------------------------------------------
# What an adapter says about its model (the answer to `describe`).

@dataclasses.dataclass
class Description:
    family: str                  # a label of your own, e.g. "featuregate-pytorch"
    description: str             # one line, e.g. "featuregate L 4, D 128 (PyTorch)"
    model_sha256: str            # content hash of the weights (sha256_files)
    vocab: int                   # logits per position
    max_tokens: int              # the longest window the model takes
    layers: int                  # coefficient axes [layer, token, stream, source]
    streams: int = 1
    sources: int = 1
    mask: Optional[torch.Tensor] = None      # bool [L, S, K], True = valid coordinate (None: all)
    # The coefficients that make the controller a no-op, [L, S, K] float32, constant over tokens
    # (continuous records only; gated: ones; MUDD: one-hot on the newest source).
    identity: Optional[torch.Tensor] = None
    static_profile: str = "LayerMean"        # the name the audit prints for S
    structure_removed: str = "GlobalMean"    # continuous: "GlobalMean" or "SourceUniformMean"
    tokenizer: str = "bytes"                 # "bytes", or "ids" (fca sends `tokenize` per split)
    record_kind: str = "continuous"          # or "expert_routing", "token_selection"
    slots: int = 0                           # routing: k (expert_routing) or 1 (token_selection)
    categories: int = 0                      # expert_routing: the number of experts E
    selected: int = 0                        # token_selection: K selected tokens per window
    config: Optional[dict] = None            # recorded in the audit's provenance
    parameter_count: int = 0
    # Per layer, the dtype the handed coefficients are cast to before the model uses them: "F32"
    # (None: every layer), "F64", "BF16" or "F16". In replay, forward returns what the model used
    # (after that cast); fca rounds what it sent the same way and compares the two digests.
    coefficient_dtypes: Optional[Sequence[str]] = None
    # What audit.json, exec.json and the console call the model ("external: <name>"); None: family.
    name: Optional[str] = None


@dataclasses.dataclass
class Coefficients:
    """A batch's record: values float32 [B, L, T, S, K]; routing records add the discrete field
    int32 [B, L, T, slots] (expert indices, or 0/1 selected)."""
    values: torch.Tensor
    discrete: Optional[torch.Tensor] = None


class Adapter:
    """Subclass and implement describe() and forward(); tokenize() when describe says "ids"."""

    def __init__(self) -> None:
        self._controller_evaluations = 0

    def describe(self) -> Description:
        raise NotImplementedError

    def forward(self, ids: torch.Tensor, coefficients: Optional[Union[torch.Tensor, Coefficients]] = None
                ) -> Tuple[torch.Tensor, Union[torch.Tensor, Coefficients]]:
        """ids int64 [B, T]; coefficients None (live) or the record to replay (a float32 tensor
        [B, L, T, S, K], or Coefficients for routing records). Returns (logits float32 [B, T, V],
        the record used)."""
        raise NotImplementedError

    def tokenize(self, text: bytes) -> Sequence[int]:
        """Token ids of a split's raw bytes (only called when describe() says tokenizer="ids")."""
        raise NotImplementedError("describe() says tokenizer='ids' but tokenize() is not implemented")

    def run_unrecorded(self, ids: torch.Tensor) -> torch.Tensor:
        """The plain live run (run_live with record 0): logits float32 [B, T, V] of the model as it
        runs without fca. A hand-written adapter's forward(ids) is its plain run; HookedAdapter
        detaches its hooks, so that a hook that changes the run (a converter that edits the
        controller's output in place) shows as a recording pass that differs from the plain one."""
        return self.forward(ids, None)[0]

    def count_controller(self, n: int = 1) -> None:
        """Call once per controller evaluation: fca checks that a replay makes none."""
        self._controller_evaluations += n

    # -- claim 3, `fca exec --external` (execution.py). HookedAdapter overrides these; a
    # hand-written adapter gets the defaults: its `model` attribute (an nn.Module) is counted, its
    # replay runs through forward(ids, record), and count_controller() counts its controller.
    executed: Dict[str, Union[str, Sequence[str]]] = {}   # unit kind -> module-name globs, e.g. {"blocks": "blocks.*"}
    reference = None                                      # an execution.Reference, or None

    def exec_model(self) -> Optional[torch.nn.Module]:
        model = getattr(self, "model", None)
        return model if isinstance(model, torch.nn.Module) else None

    def exec_device(self) -> torch.device:
        model = self.exec_model()
        for t in (list(model.parameters()) + list(model.buffers())) if model is not None else []:
            return t.device
        return torch.device("cpu")

    def exec_units(self, model: Optional[torch.nn.Module]) -> Dict[str, List[str]]:
        return units_of(model, self.executed)

    def exec_controllers(self) -> List[str]:
        return []

    def exec_counts_controllers(self) -> bool:
        """True where the exec counters count controller evaluations from the modules that ran;
        False: count_controller() does."""
        return False

    def exec_replayed(self, module: torch.nn.Module) -> bool:
        return False

    def exec_has_static_profile(self) -> bool:
        return self.describe().record_kind == "continuous"

    def record_values(self, record) -> torch.Tensor:
        return _as_record(record).values

    def exec_handed(self, record):
        return record

    def run(self, ids: torch.Tensor, coefficients=None) -> torch.Tensor:
        """The pass fca exec counts and times: logits [B, T, V] on the model's device, live
        (coefficients None) or with the record handed back. Default: forward(ids, coefficients)[0],
        which also builds the record and may copy the logits to the host; an adapter that overrides
        run() keeps that work out of its timed passes, as a reference's forward is (exec.json says
        which: `timed_pass`)."""
        return self.forward(ids, coefficients)[0]

    def exec_timed_pass(self) -> str:
        """What exec times for this adapter, in words, for exec.json."""
        overridden = type(self).run is not Adapter.run
        return "run(ids, coefficients)" if overridden else "forward(ids, coefficients)[0] (record building and any copy to the host included)"

    def exec_forward(self, ids: torch.Tensor, handed) -> torch.Tensor:
        return self.run(ids, handed)

    def exec_hooks_detached(self):
        return contextlib.nullcontext()


# ------------------------------------------------------------------------------------------------
# The server loop.

def read_message(stream: BinaryIO) -> Optional[bytes]:
    """One framed message, or None at a clean end of input."""
    prefix = stream.read(8)
    if not prefix:
        return None
    if len(prefix) < 8:
        raise ValueError(f"truncated length prefix ({len(prefix)} bytes)")
    (n,) = struct.unpack("<Q", prefix)
    if n > MAX_MESSAGE_BYTES:
        raise ValueError(f"message length {n} exceeds the limit {MAX_MESSAGE_BYTES}")
    blob = stream.read(n)
    if len(blob) != n:
        raise ValueError(f"message truncated: {len(blob)} of {n} bytes")
    return blob


def write_message(stream: BinaryIO, tensors: Dict[str, np.ndarray], metadata: Dict[str, str]) -> None:
    blob = encode_safetensors(tensors, dict(metadata, protocol=PROTOCOL))
    stream.write(struct.pack("<Q", len(blob)))
    stream.write(blob)
    stream.flush()


def _describe_message(d: Description) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    if d.record_kind not in RECORD_KINDS:
        raise AdapterError(f"describe: record_kind {d.record_kind!r} is not one of {RECORD_KINDS}")
    shape = (d.layers, d.streams, d.sources)
    mask = torch.ones(shape, dtype=torch.bool) if d.mask is None else torch.as_tensor(d.mask).bool()
    if tuple(mask.shape) != shape:
        raise AdapterError(f"describe: mask has shape {list(mask.shape)}, expected {list(shape)}")
    tensors = {"mask": mask.to(torch.uint8).numpy()}
    dtypes = list(d.coefficient_dtypes) if d.coefficient_dtypes is not None else ["F32"] * d.layers
    if len(dtypes) != d.layers or any(t not in COEFFICIENT_DTYPES for t in dtypes):
        raise AdapterError(f"describe: coefficient_dtypes {dtypes[:6]} must name one of {COEFFICIENT_DTYPES} for each "
                           f"of the {d.layers} layers")
    if d.identity is not None:
        identity = torch.as_tensor(d.identity, dtype=torch.float32)
        if tuple(identity.shape) != shape:
            raise AdapterError(f"describe: identity has shape {list(identity.shape)}, expected {list(shape)}")
        tensors["identity"] = identity.contiguous().numpy()
    name = d.name if d.name is not None else d.family
    if not name or len(name) > 200 or any(ord(ch) < 32 for ch in name):
        raise AdapterError(f"describe: name {name[:60]!r} must be 1 to 200 printable characters")
    meta = {"type": "describe", "family": d.family, "name": name, "description": d.description,
            "model_sha256": d.model_sha256, "vocab": str(d.vocab), "max_tokens": str(d.max_tokens),
            "layers": str(d.layers), "streams": str(d.streams), "sources": str(d.sources),
            "static_profile": d.static_profile, "structure_removed": d.structure_removed,
            "tokenizer": d.tokenizer, "record_kind": d.record_kind, "slots": str(d.slots),
            "categories": str(d.categories), "selected": str(d.selected),
            "config": json.dumps(d.config or {}), "parameter_count": str(d.parameter_count),
            "values_dtype": "F32", "coefficient_dtypes": ",".join(dtypes), "discrete_dtype": "I32" if d.record_kind != "continuous" else "",
            "adapter": "fca_adapter (python/fca_adapter)", "torch": torch.__version__}
    return tensors, meta


def window_nll(logits: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
    """Per-window mean NLL [B] in float64 from float32 logits [B, T, V] and targets [B, T]."""
    logp = torch.log_softmax(logits.double(), dim=-1)
    nll = -logp.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)      # [B, T]
    return nll.mean(dim=1).numpy()


def logits_digest(logits: torch.Tensor) -> str:
    """SHA-256 (hex) of the logits as contiguous little-endian float32 [B, T, V]."""
    return hashlib.sha256(logits.detach().contiguous().numpy().astype("<f4", copy=False).tobytes()).hexdigest()


def _as_record(record: Union[torch.Tensor, Coefficients]) -> Coefficients:
    return record if isinstance(record, Coefficients) else Coefficients(values=record)


def _run(adapter: Adapter, d: Description, tensors: Dict[str, np.ndarray], replay: bool, record: bool = True):
    for name in ("inputs", "targets"):
        if name not in tensors:
            raise AdapterError(f"request lacks tensor {name!r}")
    inputs = torch.from_numpy(tensors["inputs"].astype(np.int64))
    targets = torch.from_numpy(tensors["targets"].astype(np.int64))
    B, T = inputs.shape
    if not replay and not record:
        # run_live with record 0: the plain live run, the model as it runs without fca.
        with torch.inference_mode():
            logits = adapter.run_unrecorded(inputs)
        if logits.dtype != torch.float32 or tuple(logits.shape) != (B, T, d.vocab):
            raise AdapterError(f"run_unrecorded returned logits {logits.dtype} {list(logits.shape)}, "
                               f"expected float32 {[B, T, d.vocab]}")
        return {"nll": window_nll(logits, targets)}, {"type": "run_live", "logits_sha256": logits_digest(logits)}
    given = None
    if replay:
        values = torch.from_numpy(tensors["coefficients"].copy())
        discrete = torch.from_numpy(tensors["discrete"].copy()) if "discrete" in tensors else None
        given = values if d.record_kind == "continuous" else Coefficients(values, discrete)
    before = adapter._controller_evaluations
    with torch.inference_mode():
        logits, record = adapter.forward(inputs, given)
    if logits.dtype != torch.float32 or tuple(logits.shape) != (B, T, d.vocab):
        raise AdapterError(f"forward returned logits {logits.dtype} {list(logits.shape)}, "
                           f"expected float32 {[B, T, d.vocab]}")
    out = {"nll": window_nll(logits, targets)}
    meta = {"type": "run_replay" if replay else "run_live", "logits_sha256": logits_digest(logits),
            "controller_evaluations": str(adapter._controller_evaluations - before)}
    if record is None:
        raise AdapterError("forward returned no record: it returns (logits, the coefficients it used), "
                           "in replay too (fca checks that they are the ones it sent)")
    record = _as_record(record)
    values = record.values.detach().to(torch.float32).contiguous().numpy()
    discrete = None if record.discrete is None else record.discrete.detach().to(torch.int32).contiguous().numpy()
    if replay:
        # What this replay used, hashed as fca hashes what it sent: the values at valid coordinates
        # (the mask, over windows and tokens) as F32 in [B, L, T, S, K] order, then discrete I32 bytes.
        mask = np.ones((d.layers, d.streams, d.sources), dtype=bool) if d.mask is None else \
            torch.as_tensor(d.mask).bool().numpy()
        if values.shape != (B, d.layers, T, d.streams, d.sources):
            raise AdapterError(f"replay: forward returned a record of shape {list(values.shape)}, expected "
                               f"{[B, d.layers, T, d.streams, d.sources]}")
        valid = np.broadcast_to(mask[None, :, None], values.shape)
        h = hashlib.sha256(values[valid].astype("<f4", copy=False).tobytes())
        if discrete is not None:
            h.update(discrete.astype("<i4", copy=False).tobytes())
        meta["coefficients_sha256"] = h.hexdigest()
    else:
        out["coefficients"] = values
        if discrete is not None:
            out["discrete"] = discrete
    return out, meta


def serve(adapter: Adapter, stdin: Optional[BinaryIO] = None, stdout: Optional[BinaryIO] = None) -> int:
    """Answers fca's requests until the end of input (fca closes the pipe); returns the exit status."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    sys.stdout = sys.stderr          # a print() must not land in the message stream
    description: Optional[Description] = None
    exec_state: Dict[str, object] = {}   # the ExecSession of an fca exec run
    while True:
        blob = read_message(stdin)
        if blob is None:
            return 0
        try:
            tensors, meta = decode_safetensors(blob, "request")
            if meta.get("protocol") != PROTOCOL:
                raise AdapterError(f"request speaks protocol {meta.get('protocol')!r}; this adapter speaks {PROTOCOL}")
            kind = meta.get("type")
            if description is None:
                description = adapter.describe()
            if kind == "describe":
                write_message(stdout, *_describe_message(description))
            elif kind == "tokenize":
                ids = np.asarray(adapter.tokenize(tensors["text"].tobytes()), dtype=np.int32)
                write_message(stdout, {"ids": ids}, {"type": "tokenize"})
            elif kind in ("run_live", "run_replay"):
                write_message(stdout, *_run(adapter, description, tensors, kind == "run_replay", meta.get("record", "1") != "0"))
            elif kind in ("exec_prepare", "exec_pass", "exec_time"):
                write_message(stdout, *exec_answer(exec_state, adapter, description, kind, tensors, meta,
                                                   window_nll, logits_digest))
            else:
                raise AdapterError(f"unknown request type {kind!r}")
        except Exception as e:       # every failure goes back to fca as text
            detail = traceback.format_exc(limit=4) if not isinstance(e, AdapterError) else ""
            write_message(stdout, {}, {"type": "error", "message": f"{type(e).__name__}: {e}\n{detail}".strip()})


def main(make_adapter: Callable[[argparse.Namespace], Adapter],
         add_arguments: Optional[Callable[[argparse.ArgumentParser], None]] = None) -> None:
    """Parses --model and --threads (plus add_arguments'), builds the adapter and serves."""
    parser = argparse.ArgumentParser(description="fca external-model adapter (" + PROTOCOL + ")")
    parser.add_argument("--model", required=True, help="the checkpoint to load")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("FCA_ADAPTER_THREADS", "2")),
                        help="torch CPU threads (default 2)")
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    sys.exit(serve(make_adapter(args)))
