"""The PyTorch trainer: `fca train`'s schedule, windows, optimizer and files, on GPUs, under torchrun.

    torchrun --nproc-per-node 8 -m fca_torch.train --arch gated --gate featuregate \
        --layers 24 --dim 512 --heads 8 --seq 1024 --batch 16 --steps 20000 --data DIR --out fg.safetensors

One process per device (DistributedDataParallel: NCCL on GPUs, gloo on CPUs). Step s is made of
K = ranks x --grad-accum micro-batches; micro-batch k is drawn from derive_seed(seed, s, k) as in
`fca train`, rank r computes micro-batches r*A .. r*A + A - 1, and the gradient is the mean over all
K, so N ranks are one process with --grad-accum N (tested). Checkpoints are fca's: the model file
(or MUDD folder), its training state (AdamW moments, step, options) and the JSON-lines log, so
`fca eval/audit/exec` read the result and either engine resumes the other's run. With --resume a
run continues from its checkpoint when one exists (what torchrun's restarts need) and starts from
the seed otherwise. docs/torch-engine.md.
"""

import argparse
import contextlib
import datetime
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

from . import checkpoint, data, optim
from .gated import GATES, GatedTransformer, make_config as gated_config
from .mudd import Mudd, make_config as mudd_config

STATE_FORMAT = "fca-train-state-v1"
# Dense bf16 peaks (TFLOP/s) of the GPUs whose name contains the key: the MFU denominator.
GPU_PEAKS = {"H200": 989.0, "H100 PCIe": 756.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0}


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m fca_torch.train", description=__doc__.split("\n")[0],
                                allow_abbrev=False)
    p.add_argument("--arch", choices=("gated", "mudd"), default="gated")
    p.add_argument("--gate", choices=GATES, default="featuregate")
    p.add_argument("--gate-value", type=float, default=0.6)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=8, help="windows per micro-batch")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per step on each rank")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", required=True)
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--eval-windows", type=int, default=64)
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--stop-after", type=int, default=0)
    p.add_argument("--out", required=True, help="checkpoint: a .safetensors file (gated) or a folder (mudd)")
    p.add_argument("--log", help="JSON-lines log (default: fca's name for --out)")
    p.add_argument("--resume", action="store_true", help="continue from --out and its training state when they exist")
    p.add_argument("--init", help="start from this checkpoint's weights instead of the seed's initialisation")
    p.add_argument("--device", default="auto", help="auto (cuda:<local rank> when a GPU is present), cpu, cuda")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="auto: bf16 autocast on GPUs that support it, fp32 otherwise")
    p.add_argument("--threads", type=int, default=0, help="CPU threads per process (0: torch's default)")
    p.add_argument("--peak-tflops", type=float, default=0.0, help="the device's peak for MFU (default: known GPUs)")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    for name in ("layers", "dim", "heads", "seq", "batch", "grad_accum", "steps"):
        if getattr(a, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive, found {getattr(a, name)}")
    return a


def files_of(arch: str, out: str, log: str = None) -> dict:
    """fca's file names (src/train/train_family.cpp): stem.safetensors + stem.train-state.safetensors +
    out.log.jsonl for a file; DIR/model.safetensors + DIR/train-state.safetensors + DIR/train.log.jsonl."""
    if arch == "mudd":
        f = {"weights": os.path.join(out, "model.safetensors"), "state": os.path.join(out, "train-state.safetensors"),
             "log": os.path.join(out, "train.log.jsonl")}
    else:
        stem = out[:-len(".safetensors")] if out.endswith(".safetensors") else out
        f = {"weights": out, "state": stem + ".train-state.safetensors", "log": out + ".log.jsonl"}
    if log:
        f["log"] = log
    return f


def build_model(a):
    if a.arch == "mudd":
        return Mudd(mudd_config(a.layers, a.dim, a.heads, a.seq))
    return GatedTransformer(gated_config(a.layers, a.dim, a.heads, a.seq, a.gate, a.gate_value))


def options_json(a, model, ranks: int) -> dict:
    """The options as fca records them (trainer.cpp options_json): a resume in either engine checks them."""
    return {"arch": a.arch, "config": model.config, "batch": a.batch, "grad_accum": a.grad_accum * ranks,
            "steps": a.steps, "lr": a.lr, "warmup": a.warmup, "min_lr_ratio": a.min_lr_ratio, "clip": a.clip,
            "beta1": 0.9, "beta2": 0.95, "eps": 1e-08, "weight_decay": a.weight_decay, "seed": a.seed,
            "eval_every": a.eval_every, "eval_windows": a.eval_windows}


# ---- checkpoints --------------------------------------------------------------------------------

def save_checkpoint(a, files, model, opt: optim.AdamW, step: int, options: dict, train_sha: str) -> None:
    """The weights, then the state naming the weights' hash (fca refuses a mismatched pair)."""
    import fca_adapter
    model.save(os.path.dirname(files["weights"]) if a.arch == "mudd" else files["weights"],
               {"train_step": str(step), "train_seed": str(a.seed), "train_data_sha256": train_sha, "engine": "torch"})
    tensors = {}
    for name in model.fca_state():
        tensors["adam.m." + name] = opt.m[name]
        tensors["adam.v." + name] = opt.v[name]
    checkpoint.write_tensors(files["state"], tensors, {
        "format": STATE_FORMAT, "step": str(step), "options": json.dumps(options, separators=(",", ":")),
        "model_sha256": fca_adapter.sha256_files([files["weights"]])})


def load_checkpoint(files, model, opt: optim.AdamW, options: dict) -> int:
    import fca_adapter
    state, meta = checkpoint.read_tensors(files["state"])
    where = files["state"]
    if meta.get("format") != STATE_FORMAT:
        raise ValueError(f"{where}: format {meta.get('format')!r}, expected {STATE_FORMAT!r}")
    if meta.get("model_sha256") != fca_adapter.sha256_files([files["weights"]]):
        raise ValueError(f"{where}: was written for a different {files['weights']} (model hash mismatch)")
    saved = json.loads(meta.get("options", "{}"))
    for key, value in options.items():
        if key in saved and saved[key] != value:
            raise ValueError(f"{where}: --resume with a different {key} (saved {json.dumps(saved[key])}, now {json.dumps(value)})")
    loaded = type(model).load(os.path.dirname(files["weights"]) if isinstance(model, Mudd) else files["weights"])
    with torch.no_grad():
        for (name, p), q in zip(model.fca_state().items(), loaded.fca_state().values()):
            p.copy_(q)
            opt.m[name].copy_(state["adam.m." + name])
            opt.v[name].copy_(state["adam.v." + name])
    opt.steps_taken = int(meta["step"])
    return opt.steps_taken


# ---- evaluation ----------------------------------------------------------------------------------

@torch.no_grad()
def validate(model, split: data.Split, T: int, windows: int, batch: int, device) -> dict:
    """Mean NLL over the evenly spaced windows, and the gated family's gate mass."""
    model.eval()
    starts = split.evenly_spaced(T, windows)
    nll_sum, gate_sum, gate_count = 0.0, 0.0, 0
    for i in range(0, len(starts), batch):
        w = split.windows_at(starts[i:i + batch], T).to(device)
        if isinstance(model, GatedTransformer):
            logits, gates = model(w[:, :T], return_gates=True)
            gate_sum += float(gates.double().sum())
            gate_count += gates.numel()
        else:
            logits = model(w[:, :T])
        ce = F.cross_entropy(logits.float().transpose(1, 2), w[:, 1:], reduction="none")
        nll_sum += float(ce.double().mean(1).sum())
    model.train()
    out = {"nll": nll_sum / len(starts), "windows": len(starts)}
    if gate_count:
        out["gate_mass"] = gate_sum / gate_count
    return out


# ---- the run -------------------------------------------------------------------------------------

class Ranks:
    """torchrun's environment: rank, world size, local rank; the process group when world > 1."""

    def __init__(self, device_arg: str):
        self.rank, self.size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        self.local = int(os.environ.get("LOCAL_RANK", 0))
        cuda = torch.cuda.is_available() and device_arg != "cpu"
        self.device = torch.device(f"cuda:{self.local % torch.cuda.device_count()}" if cuda else "cpu")
        if device_arg not in ("auto", "cpu", "cuda"):
            self.device = torch.device(device_arg)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if self.size > 1:
            import torch.distributed as dist
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")

    @property
    def root(self) -> bool:
        return self.rank == 0

    def sum(self, value: float) -> float:
        if self.size == 1:
            return value
        import torch.distributed as dist
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return float(t)

    def barrier(self) -> None:
        if self.size > 1:
            import torch.distributed as dist
            dist.barrier()


def provenance(ranks: Ranks) -> dict:
    device = torch.cuda.get_device_name(ranks.device) if ranks.device.type == "cuda" else "cpu"
    return {"fca_version": checkpoint.VERSION, "git_commit": checkpoint.git_commit(), "engine": "torch", "torch": torch.__version__, "device": device,
            "ranks": ranks.size, "threads": torch.get_num_threads(), "python": sys.version.split()[0],
            "created_utc": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")}


def peak_flops(a, ranks: Ranks):
    if a.peak_tflops > 0:
        return a.peak_tflops * 1e12
    if ranks.device.type == "cuda":
        name = torch.cuda.get_device_name(ranks.device)
        for key, tflops in GPU_PEAKS.items():
            if key in name:
                return tflops * 1e12
    return None


def train(a) -> int:
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    ranks = Ranks(a.device)
    bf16 = ranks.device.type == "cuda" and (a.precision == "bf16" or (a.precision == "auto" and torch.cuda.is_bf16_supported()))
    if a.precision == "bf16" and ranks.device.type != "cuda":
        raise ValueError("--precision bf16 needs a GPU (bf16 autocast on the CPU is not what fca's CPU engine runs)")
    corpus = data.open_corpus(a.data)
    train_split, valid_split = corpus["train"], corpus["valid"]
    T = a.seq
    train_split.window_count(T)
    valid_split.window_count(T)
    train_sha = train_split.sha256()

    model = build_model(a)
    files = files_of(a.arch, a.out, a.log)
    options = options_json(a, model, ranks.size)
    opt = optim.AdamW(model.fca_state(), weight_decay=a.weight_decay)
    resuming = a.resume and os.path.exists(files["weights"]) and os.path.exists(files["state"])
    if resuming:
        first_step = load_checkpoint(files, model, opt, options)
    else:
        first_step = 0
        if a.init:
            init = type(model).load(a.init)
            model.load_state_dict(init.state_dict())
        else:
            model.initialize(a.seed)
    model.to(ranks.device)
    opt.m = {n: t.to(ranks.device) for n, t in opt.m.items()}
    opt.v = {n: t.to(ranks.device) for n, t in opt.v.items()}
    opt.params = model.fca_state()
    net = model
    if ranks.size > 1:
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[ranks.device.index] if ranks.device.type == "cuda" else None)

    log = None
    if ranks.root:
        if a.arch == "mudd":
            os.makedirs(a.out, exist_ok=True)
        log = open(files["log"], "a" if resuming else "w")
        start = {"type": "resume" if resuming else "start", "step": first_step, "provenance": provenance(ranks),
                 "family": a.arch, "label": model.label(), "options": options,
                 "parameters": sum(p.numel() for p in model.parameters()), "ranks": ranks.size,
                 "precision": "bf16" if bf16 else "fp32",
                 "data": {"dir": a.data, "train_sha256": train_sha, "valid_sha256": valid_split.sha256()}}
        log.write(json.dumps(start) + "\n")
        log.flush()

    last_step = min(a.steps, first_step + a.stop_after) if a.stop_after > 0 else a.steps
    A, K = a.grad_accum, a.grad_accum * ranks.size
    tokens_per_step = a.batch * T * K
    peak = peak_flops(a, ranks)
    flops_per_token = model.flops_per_token(T)
    started, loss = time.perf_counter(), float("nan")
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    model.train()
    for step in range(first_step, last_step):
        lr = optim.learning_rate(step, a.steps, a.warmup, a.lr, a.min_lr_ratio)
        for p in model.parameters():
            p.grad = None
        local_loss = torch.zeros((), dtype=torch.float64, device=ranks.device)
        for j in range(A):
            k = ranks.rank * A + j
            w = data.micro_batch(train_split, a.seed, step, k, a.batch, T).to(ranks.device)
            sync = contextlib.nullcontext() if (ranks.size == 1 or j == A - 1) else net.no_sync()
            with sync:
                with autocast:
                    logits = net(w[:, :T])
                micro_loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
                (micro_loss / A).backward()
            local_loss += micro_loss.detach().double()   # on the device: one synchronisation per step
        loss = ranks.sum(float(local_loss)) / K
        if not math.isfinite(loss):
            raise FloatingPointError(f"step {step}: training diverged (loss {loss}): lower --lr")
        grad_norm = optim.clip_gradients(list(model.parameters()), a.clip)
        opt.step(lr)
        done = step + 1
        elapsed = time.perf_counter() - started
        tokens_per_s = (done - first_step) * tokens_per_step / elapsed
        mfu = tokens_per_s * flops_per_token / (peak * ranks.size) if peak else None
        if ranks.root and (done % a.log_every == 0 or done == last_step):
            record = {"type": "step", "step": done, "loss": loss, "lr": lr, "grad_norm": grad_norm,
                      "tokens_per_s": tokens_per_s, "elapsed_s": elapsed}
            if mfu is not None:
                record["mfu"] = mfu
            log.write(json.dumps(record) + "\n")
            log.flush()
            if not a.no_progress:
                eta = elapsed / (done - first_step) * (last_step - done)
                extra = f"  MFU {100 * mfu:.1f}%" if mfu is not None else ""
                print(f"train {done}/{last_step}: loss {loss:.4f}  {tokens_per_s:,.0f} tok/s{extra}  ETA {eta:,.0f} s",
                      file=sys.stderr, flush=True)
        if ranks.root and ((a.eval_every > 0 and done % a.eval_every == 0) or done == a.steps):
            v = validate(model, valid_split, T, a.eval_windows, a.batch, ranks.device)
            record = {"type": "valid", "step": done, "nll": v["nll"], "bits_per_byte": v["nll"] / math.log(2),
                      "byte_ppl": math.exp(v["nll"]), "windows": v["windows"]}
            if "gate_mass" in v:
                record["gate_mass"] = v["gate_mass"]
            log.write(json.dumps(record) + "\n")
            log.flush()
        if ranks.root and ((a.checkpoint_every > 0 and done % a.checkpoint_every == 0) or done == last_step):
            save_checkpoint(a, files, model, opt, done, options, train_sha)
        ranks.barrier()
    if ranks.root:
        seconds = time.perf_counter() - started
        end = {"type": "end", "step": last_step, "loss": loss, "seconds": seconds,
               "tokens_per_s": (last_step - first_step) * tokens_per_step / max(seconds, 1e-9)}
        log.write(json.dumps(end) + "\n")
        log.close()
    return 0


def main(argv=None) -> int:
    a = parse_args(argv)
    try:
        return train(a)
    except (ValueError, FileNotFoundError, FloatingPointError) as e:
        print(f"fca_torch.train: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
