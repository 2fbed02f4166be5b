"""Claim 3 in the adapter's process: `fca exec --external "<command>"` (docs/external-protocol.md).

fca sends `exec_prepare` once, then `exec_pass` (one pass of a batch in a mode, counted or only its
NLL) and `exec_time` (one timed pass of the timing batch). This module answers them for any
Adapter: the modes are

- `live`: the model with its controller, as `forward(ids)` runs it;
- `replay`: the coefficients its controller recorded on the same batch handed back (the
  controller does not run);
- `static_profile`: the mean of each coefficient over the calibration windows and tokens handed to
  every window and token (fca's LayerMean);
- `reference`: a model or callable the user names (`Reference`): a Dense model, or the model with
  its controller replaced by constants.

Counting (counting.py) is attached only to counted passes; a timed pass runs with no hook of
fca_adapter on any module, and is timed by the model's device: `time.perf_counter` around the pass
on the CPU, CUDA events recorded around it (synchronised before and after) on a GPU.
"""

import ctypes
import dataclasses
import fnmatch
import json
import time
from typing import Callable, Dict, List, Optional, Sequence, Union

import numpy as np
import torch

from .counting import count_pass
from .errors import AdapterError

@dataclasses.dataclass
class Reference:
    """What `fca exec` compares the model's latency with (its `reference` mode).

    label: how tables name it, e.g. "Dense".
    forward: ids int64 [B, T] on the model's device -> logits [B, T, V] (or an output with .logits, or
        a tuple whose first element is the logits).
    model: the nn.Module that forward runs, for counting its modules and FLOPs (default: the
        adapter's model, for a callable that runs the same model with its controller replaced by
        constants). Its executed units are matched with the adapter's `executed` globs."""
    label: str
    forward: Callable
    model: Optional[torch.nn.Module] = None


def logits_of(output) -> torch.Tensor:
    """The logits of a forward's output: itself, its .logits, or the first element of a tuple."""
    if hasattr(output, "logits"):
        return output.logits
    if isinstance(output, (tuple, list)):
        return output[0]
    return output


def fix_malloc_thresholds() -> bool:
    """glibc's malloc serves large blocks (a pass's activations) with mmap below a threshold that it
    raises at run time after such a block is freed; whether and when it moved decides, for the life
    of the process, whether every pass faults in fresh pages. Measured on the hooked FeatureGate
    (L 4, D 128, T 128, batch 8): 5 of 17 adapter processes ran 2.2-3x slower throughout, and none
    of 6 once the threshold was fixed. A fixed threshold (32 MiB, glibc's largest) and no trimming
    make every process take the fast path. False where the C library has no mallopt (not glibc)."""
    try:
        libc = ctypes.CDLL(None)
        return bool(libc.mallopt(-3, 32 << 20)) and bool(libc.mallopt(-1, 1 << 30))   # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        return False


def _timer_name(device: torch.device) -> str:
    return "cuda_events" if device.type == "cuda" else "perf_counter"


def time_call(run: Callable[[], object], device: torch.device) -> float:
    """Seconds of one call of run() on `device`: CUDA events around it, synchronised before and
    after (the kernels it queued are finished), or perf_counter on the CPU. The events go on the
    current stream of the model's device, where its kernels run: recorded on another device's
    stream (cuda:0's for a model on cuda:1) they would time the launches, not the kernels."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        stream = torch.cuda.current_stream(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        run()
        end.record(stream)
        torch.cuda.synchronize(device)
        return start.elapsed_time(end) / 1e3
    begin = time.perf_counter()
    run()
    return time.perf_counter() - begin


class ExecSession:
    """The exec requests of one fca exec run against one adapter (created by serve on the first
    exec_prepare). The adapter supplies, through its exec interface (protocol.Adapter):
    exec_model(), exec_controllers(), exec_units(model), exec_replayed(module), exec_handed(record)
    and exec_forward(ids, handed)."""

    def __init__(self, adapter, description):
        self.adapter = adapter
        self.description = description
        self.model = adapter.exec_model()
        self.device = adapter.exec_device()
        self.malloc_fixed = fix_malloc_thresholds()     # before any pass that is counted or timed
        self.reference: Optional[Reference] = getattr(adapter, "reference", None)
        self.units = adapter.exec_units(self.model)
        self.timing_ids: Optional[torch.Tensor] = None
        self.handed: Dict[str, object] = {}     # mode -> what the timing batch's pass is handed
        self.profile: Optional[torch.Tensor] = None   # float32 [L, S, K]
        self.reference_absent: Dict[str, str] = {}    # unit kind -> why the reference counts 0 of it
        if self.reference is not None:
            ref_model = self.reference.model if self.reference.model is not None else self.model
            # A reference may lack unit kinds the model has (a Dense model has no experts): those
            # count 0 for it, with the reason. A kind both have is compared unit for unit.
            ref_units = units_of(ref_model, adapter.executed, allow_missing=True)
            mismatch = {k: (len(ref_units[k]), len(v)) for k, v in self.units.items() if ref_units.get(k) and len(ref_units[k]) != len(v)}
            if mismatch:
                raise AdapterError(f"reference {self.reference.label!r}: its executed units differ from the model's "
                                   f"(kind: (reference, model) modules): {mismatch}; a reference is compared per unit, "
                                   f"so a kind it has needs as many modules as the model's")
            self.reference_units = {k: v for k, v in ref_units.items() if v}
            for kind in self.units:
                if not ref_units.get(kind):
                    self.reference_absent[kind] = (f"the reference {self.reference.label!r} has no module matching "
                                                   f"executed[{kind!r}]: it runs none of this kind, counted as 0")

    # -- modes --------------------------------------------------------------------------------
    def modes(self) -> List[Dict[str, str]]:
        modes = [{"mode": "live"}, {"mode": "replay"}]
        if self.profile is not None:
            modes.append({"mode": "static_profile", "profile": self.description.static_profile})
        if self.reference is not None:
            modes.append({"mode": "reference", "label": self.reference.label})
        return modes

    def _check_mode(self, mode: str) -> None:
        offered = [m["mode"] for m in self.modes()]
        if mode not in offered:
            raise AdapterError(f"exec mode {mode!r} is not offered by this adapter (offered: {offered})")

    def _record(self, ids: torch.Tensor):
        """The record of a live pass over ids: what replay hands back."""
        _, record = self.adapter.forward(ids, None)
        return record

    def _profile_record(self, B: int, T: int) -> torch.Tensor:
        L, S, K = self.profile.shape
        return self.profile[None, :, None].expand(B, L, T, S, K).contiguous()

    def _handed_for(self, mode: str, ids: torch.Tensor):
        """What a pass of `mode` over ids is handed, prepared outside any counted or timed region."""
        B, T = ids.shape
        if mode == "replay":
            return self.adapter.exec_handed(self._record(ids))
        if mode == "static_profile":
            return self.adapter.exec_handed(self._profile_record(B, T))
        return None

    def _run(self, mode: str, ids: torch.Tensor, handed) -> torch.Tensor:
        if mode == "reference":
            return logits_of(self.reference.forward(ids.to(self.device)))
        return self.adapter.exec_forward(ids, handed)

    # -- requests -------------------------------------------------------------------------------
    def prepare(self, inputs: np.ndarray, calibration: np.ndarray) -> Dict[str, str]:
        ids = torch.from_numpy(inputs.astype(np.int64))
        calib = torch.from_numpy(calibration.astype(np.int64))
        B = ids.shape[0]
        with torch.inference_mode():
            # Static profile: the mean over the calibration windows and tokens of every coordinate.
            if self.adapter.exec_has_static_profile():
                total, count = None, 0
                for w0 in range(0, calib.shape[0], B):
                    values = self.adapter.record_values(self._record(calib[w0:w0 + B])).double()  # [b, L, T, S, K]
                    s = values.sum(dim=(0, 2))
                    total = s if total is None else total + s
                    count += values.shape[0] * values.shape[2]
                self.profile = (total / count).to(torch.float32)
            self.timing_ids = ids
            self.handed = {mode: self._handed_for(mode, ids) for mode in ("replay", "static_profile")
                           if mode in [m["mode"] for m in self.modes()]}
        return {"modes": json.dumps(self.modes()), "device": str(self.device), "timer": _timer_name(self.device),
                "malloc": "glibc thresholds fixed (mmap 32 MiB, no trim)" if self.malloc_fixed else "unchanged",
                "threads": str(torch.get_num_threads()), "units": json.dumps({k: len(v) for k, v in self.units.items()}),
                "timed_pass": self.adapter.exec_timed_pass()}

    def run_pass(self, mode: str, inputs: np.ndarray, targets: np.ndarray, count: bool):
        """(logits float32 on the CPU, counts or None) of one pass of `mode` over a batch."""
        self._check_mode(mode)
        ids = torch.from_numpy(inputs.astype(np.int64))
        with torch.inference_mode():
            handed = self._handed_for(mode, ids)
            if not count:
                return self._run(mode, ids, handed).to(torch.float32).cpu(), None
            if mode == "reference":
                ref_model = self.reference.model if self.reference.model is not None else self.model
                # A callable over the adapter's own model keeps its controllers: a constant
                # replacement shows 0 evaluations, a controller that still runs shows its calls.
                controllers = self.adapter.exec_controllers() if self.reference.model is None else []
                models, units = {"": ref_model}, self.reference_units
            else:
                models, units, controllers = {"": self.model}, self.units, self.adapter.exec_controllers()
            before = self.adapter._controller_evaluations
            with self.adapter.exec_hooks_detached():
                logits, counts = count_pass(lambda: self._run(mode, ids, handed), {k: m for k, m in models.items() if m is not None},
                                            controllers, self.adapter.exec_replayed, units)
            if mode == "reference":
                for kind, why in self.reference_absent.items():
                    counts["units"][kind] = {"modules": 0, "calls": 0, "rows": 0, "absent": why}
            if mode != "reference" and not self.adapter.exec_counts_controllers():
                # A hand-written adapter's controller is no module fca_adapter knows: its count_controller() calls.
                counts["controller_evaluations"] = self.adapter._controller_evaluations - before
            elif mode != "reference":
                # A HookedAdapter's controllers run by a route the module hooks never see (their
                # class-level forward called directly during a replay) count too.
                counts["controller_evaluations"] += self.adapter._controller_evaluations - before
            counts["controller_evaluations_counted_by"] = (
                "module hooks" if mode == "reference" or self.adapter.exec_counts_controllers() else "count_controller()")
        return logits.to(torch.float32).cpu(), counts

    def time_pass(self, mode: str) -> float:
        self._check_mode(mode)
        if self.timing_ids is None:
            raise AdapterError("exec_time before exec_prepare")
        ids, handed = self.timing_ids, self.handed.get(mode)
        with torch.inference_mode(), self.adapter.exec_hooks_detached():
            return time_call(lambda: self._run(mode, ids, handed), self.device)


def answer(session_holder: Dict[str, ExecSession], adapter, description, kind: str, tensors: Dict[str, np.ndarray],
           meta: Dict[str, str], window_nll, logits_digest):
    """(tensors, metadata) answering one exec request (serve calls this for exec_* types)."""
    if kind == "exec_prepare":
        for name in ("inputs", "calibration"):
            if name not in tensors:
                raise AdapterError(f"exec_prepare lacks tensor {name!r}")
        session_holder["session"] = ExecSession(adapter, description)
        return {}, dict(session_holder["session"].prepare(tensors["inputs"], tensors["calibration"]), type=kind)
    session = session_holder.get("session")
    if session is None:
        raise AdapterError(f"{kind} before exec_prepare")
    mode = meta.get("mode", "")
    if kind == "exec_time":
        return {}, {"type": kind, "seconds": repr(float(session.time_pass(mode)))}
    if kind == "exec_pass":
        for name in ("inputs", "targets"):
            if name not in tensors:
                raise AdapterError(f"exec_pass lacks tensor {name!r}")
        count = meta.get("count", "0") == "1"
        logits, counts = session.run_pass(mode, tensors["inputs"], tensors["targets"], count)
        targets = torch.from_numpy(tensors["targets"].astype(np.int64))
        out_meta = {"type": kind, "logits_sha256": logits_digest(logits)}
        if counts is not None:
            out_meta["counts"] = json.dumps(counts)
        return {"nll": window_nll(logits, targets)}, out_meta
    raise AdapterError(f"unknown exec request {kind!r}")


def glob_match(pattern: Sequence[str], name: Sequence[str]) -> bool:
    """A dotted module name (split) against a glob (split): `*` one component or part of one (fnmatch),
    `**` any number of components."""
    if not pattern:
        return not name
    if pattern[0] == "**":
        return any(glob_match(pattern[1:], name[i:]) for i in range(len(name) + 1))
    return bool(name) and fnmatch.fnmatchcase(name[0], pattern[0]) and glob_match(pattern[1:], name[1:])


def units_of(model: Optional[torch.nn.Module], executed: Dict[str, Union[str, Sequence[str]]],
             allow_missing: bool = False) -> Dict[str, List[str]]:
    """kind -> the names of the modules its globs match, in named_modules() order. A kind whose globs
    match nothing is an error, or (allow_missing: a reference's units) an empty list."""
    if not executed:
        return {}
    if model is None:
        raise AdapterError("executed units need a model (an nn.Module) to match their globs in")
    names = [n for n, _ in model.named_modules() if n]
    out = {}
    for kind, globs in executed.items():
        globs = [globs] if isinstance(globs, str) else list(globs)
        hits = [n for n in names if any(glob_match(g.split("."), n.split(".")) for g in globs)]
        if not hits and allow_missing:
            out[kind] = []
            continue
        if not hits:
            raise AdapterError(f"executed[{kind!r}]: {globs} match no module of {type(model).__name__} "
                             f"(module names look like: {', '.join(names[:8])})")
        # A unit inside another of its kind would count the same rows twice (as for controllers).
        nested = [(inner, outer) for inner in hits for outer in hits if inner.startswith(outer + ".")]
        if nested:
            raise AdapterError(f"executed[{kind!r}]: {globs} match {nested[0][0]!r} inside {nested[0][1]!r}: a unit's rows "
                               f"would be counted twice; name the units, not their submodules (e.g. 'blocks.*', not 'blocks.**')")
        out[kind] = hits
    return out
