"""The Python API: audit an adapter's in-memory model, or measure its execution, with one call.

    result = fca_adapter.audit(adapter, data="data/nlp-corpus", out="runs/my-audit", eval_windows=128)

runs `fca audit` on the model this process already holds (loaded once, on its own device; no
second Python process): fca starts as a child of this process, and its adapter command is a relay of
two `cat`s that carry fca's requests to this process and the answers back over inherited pipes,
which `serve` answers here. fca's progress shows on stderr; a failure raises AuditError with fca's
message; the result is audit.json as a dict. Flags are fca audit's, with underscores for dashes
(`eval_windows=32`, `no_progress=True`, `allow_insensitive_replay=True`). The fca binary is `fca=`,
else $FCA_BIN, else `fca` on PATH. `exec(adapter, data=..., out=...)` runs `fca exec` the same way
and returns exec.json.
"""

import json
import os
import shutil
import subprocess
import sys
import threading
from typing import Optional

from .protocol import Adapter, serve


def _env_int(names, default: int) -> int:
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return default


def rank() -> int:
    """This adapter's rank when fca runs under mpirun or srun (fca sets FCA_RANK), else 0."""
    return _env_int(("FCA_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"), 0)


def ranks() -> int:
    """The number of ranks (FCA_RANKS), else 1."""
    return _env_int(("FCA_RANKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"), 1)


def local_rank() -> int:
    """This rank's index on its node (the launcher's OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID or
    SLURM_LOCALID), else 0: pick the GPU with it, e.g. f"cuda:{local_rank() % torch.cuda.device_count()}"."""
    return _env_int(("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"), 0)


class AuditError(Exception):
    """fca audit failed; the message is fca's."""


def _flag_args(flags) -> list:
    args = []
    for key, value in flags.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            args += [flag, ",".join(str(v) for v in value)]
        else:
            args += [flag, str(value)]
    return args


def find_fca(fca: Optional[str] = None) -> str:
    binary = fca or os.environ.get("FCA_BIN") or shutil.which("fca")
    if not binary:
        raise AuditError("the fca binary was not found: pass fca=PATH, set FCA_BIN, or put fca on PATH (make install)")
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        raise AuditError(f"fca={binary!r} is not an executable file")
    return binary


def _run_fca(subcommand: str, adapter: Adapter, out: str, data: Optional[str], fca: Optional[str], flags) -> None:
    """Runs `fca SUBCOMMAND --external <relay> --out OUT ...` with this process answering the adapter's
    requests; raises AuditError with fca's message when it fails."""
    binary = find_fca(fca)
    requests_r, requests_w = os.pipe()   # fca's relay writes requests into requests_w; serve reads them
    answers_r, answers_w = os.pipe()     # serve writes answers into answers_w; the relay reads them
    # The answers' cat runs in the background (an asynchronous list's stdin would be /dev/null, but it
    # reads answers_r); the requests' cat is the shell itself, reading fca's pipe on its stdin.
    relay = f"cat <&{answers_r} & exec cat >&{requests_w}"
    command = [binary, subcommand, "--external", relay, "--out", out] + (["--data", data] if data else []) + _flag_args(flags)
    process = subprocess.Popen(command, pass_fds=(requests_w, answers_r), stdin=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    os.close(requests_w)
    os.close(answers_r)
    tail = []

    def show_progress():   # fca's stderr to ours, line by line, keeping the end for an error
        for line in iter(process.stderr.readline, b""):
            text = line.decode("utf-8", "replace")
            sys.stderr.write(text)
            tail.append(text)
            del tail[:-20]
    shower = threading.Thread(target=show_progress, daemon=True)
    shower.start()
    stdout = sys.stdout
    try:
        with os.fdopen(requests_r, "rb") as requests, os.fdopen(answers_w, "wb") as answers:
            serve(adapter, stdin=requests, stdout=answers)
    finally:
        sys.stdout = stdout                # serve points stdout at stderr for the CLI form
    status = process.wait()
    shower.join()
    if status != 0:
        errors = [line.strip() for line in tail if line.startswith("fca: ")]
        usage = [line.strip() for line in tail if line.strip() and not line.startswith("Run with --help")]
        message = errors[-1] if errors else usage[-1] if usage else f"fca {subcommand} exited with status {status}"
        # Before the adapter has described itself fca can only name its command, which here is the
        # relay: the message names the adapter instead.
        raise AuditError(message.replace(f"`{relay}`", f"adapter '{_adapter_name(adapter)}'"))


def _adapter_name(adapter: Adapter) -> str:
    """The adapter's name without asking it to describe itself (which may be what failed)."""
    name = getattr(adapter, "_name", None)       # HookedAdapter's name=, or the model's class
    return name if isinstance(name, str) and name else type(adapter).__name__


def audit(adapter: Adapter, data: Optional[str] = None, out: Optional[str] = None, fca: Optional[str] = None,
          **flags) -> dict:
    """Runs `fca audit` on `adapter` in this process and returns audit.json (see the module docstring)."""
    if out is None:
        raise AuditError("audit: give out= (the output folder of audit.json, windows.csv, audit.md)")
    _run_fca("audit", adapter, out, data, fca, flags)
    with open(os.path.join(out, "audit.json")) as f:
        return json.load(f)


def exec(adapter: Adapter, data: Optional[str] = None, out: Optional[str] = None, fca: Optional[str] = None,
         reference=None, **flags) -> dict:  # noqa: A001 (fca's command name)
    """Runs `fca exec` (claim 3: executed work, FLOPs and latency of the model in this process, on its
    own device) and returns exec.json. `reference`: an execution.Reference the latency is compared
    with (default: the adapter's own). Flags are fca exec's, with underscores for dashes
    (`runs=20`, `batch=8`, `eval_windows=16`, `no_progress=True`)."""
    if out is None:
        raise AuditError("exec: give out= (the output folder of exec.json, exec.md)")
    if reference is not None:
        adapter.reference = reference
    _run_fca("exec", adapter, out, data, fca, flags)
    with open(os.path.join(out, "exec.json")) as f:
        return json.load(f)
