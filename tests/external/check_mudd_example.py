#!/usr/bin/env python3
"""Checks examples/mudd_adapter.py's MuddPythia against the golden fp32 reference outputs in
tests/data/muddpythia-tiny/fixture.safetensors, and its replay contract.

    python3 tests/external/check_mudd_example.py [--testdata DIR]

Exits nonzero on any failure. Needs python3 with numpy and torch only.
"""

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))

# Tolerances (max |diff|, float32 on CPU). The fixture is the reference PyTorch code run in fp32, and
# this model does the same operations in the same order (including the reference's interleaved RoPE
# output layout, which fixes the summation order of q.k), so with the reference's PyTorch (1.13, CPU)
# it reproduces the fixture bit for bit; the check prints whether it did. Other PyTorch/BLAS builds
# may block GEMMs differently, so the gate allows round-off: a variant of this model that differs
# only in summation order (half-split RoPE layout) measured 2.3e-5 on logits and 5.8e-6 on alpha,
# and the reference itself sits 8.3e-5 / 2.0e-5 from float64 (testdata README; the live run
# amplifies tiny alpha differences through the mixing). We allow 1e-4 for live logits and 4e-5 for
# alpha (about 4x and 7x that round-off-only variant, and 5x tighter than the README's suggested
# atol for independent implementations, 5e-4 / 2e-4), and 2e-5 for replays driven by the stored
# alphas (the README's suggested atol; the round-off-only variant measured 1.6e-6 there).
TOL_LOGITS = 1e-4
TOL_ALPHA = 4e-5
TOL_NLL = 5e-5       # the fixture's nll is float64 rounded to F32 (about 4e-7 at 6.7)
TOL_REPLAY = 2e-5


def load_example():
    spec = importlib.util.spec_from_file_location("mudd_adapter", os.path.join(REPO, "examples", "mudd_adapter.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pad(model, per_layer):
    """Fixture alphas {i: [C_i, B, T, i+2]} -> padded [B, L, T, 4, L+1] (zeros elsewhere)."""
    C, B, T, _ = per_layer[0].shape
    out = torch.zeros(B, model.L, T, 4, model.L + 1)
    for i, a in per_layer.items():
        out[:, i, :, :a.shape[0], :a.shape[3]] = a.permute(1, 2, 0, 3)
    return out


def protocol_round_trip(fa, folder, ids, logits, flag):
    """Runs the example as fca would (a child process speaking fca-external-v1 on stdin/stdout):
    describe, run_live, run_replay with the returned coefficients, then end of input."""
    cmd = [sys.executable, os.path.join(REPO, "examples", "mudd_adapter.py"), "--model", folder, "--threads", "2"]
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    def ask(tensors, **meta):
        fa.write_message(child.stdin, tensors, meta)
        answer = fa.decode_safetensors(fa.read_message(child.stdout), "answer")
        if answer[1].get("type") == "error":
            raise RuntimeError(answer[1].get("message"))
        return answer
    try:
        tensors, meta = ask({}, type="describe")
        # valid coefficients: 4 streams x (i+2) sources for i = 0..2, then 1 x 5: 8 + 12 + 16 + 5 = 41
        flag("protocol: describe", meta["family"] == "mudd-pytorch" and meta["sources"] == "5"
             and tensors["mask"].shape == (4, 4, 5) and int(tensors["mask"].sum()) == 41
             and float(tensors["identity"].sum()) == 13.0, meta["description"])
        request = {"inputs": ids.numpy(), "targets": ids.roll(-1, 1).numpy()}
        live, live_meta = ask(request, type="run_live")
        replay, replay_meta = ask(dict(request, coefficients=live["coefficients"]), type="run_replay")
        flag("protocol: live/replay logits digests equal, replay made 0 controller evaluations",
             live_meta["logits_sha256"] == replay_meta["logits_sha256"] == fa.logits_digest(logits)
             and live_meta["controller_evaluations"] == "4" and replay_meta["controller_evaluations"] == "0",
             f"controller evaluations {live_meta['controller_evaluations']} / {replay_meta['controller_evaluations']}")
    except Exception as e:  # a broken child shows up here
        flag("protocol round trip", False, f"{type(e).__name__}: {e}")
    finally:
        child.stdin.close()
        child.wait(timeout=60)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--testdata", default=os.path.join(REPO, "tests", "data"))
    args = parser.parse_args()
    folder = os.path.join(args.testdata, "muddpythia-tiny")
    torch.set_num_threads(2)
    ex = load_example()
    failures = []

    def check(name, diff, tol):
        ok = diff <= tol
        print(f"{'ok  ' if ok else 'FAIL'} {name}: max |diff| = {diff:.3e} (tol {tol:.0e})")
        if not ok:
            failures.append(name)

    def flag(name, ok, detail=""):
        print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
        if not ok:
            failures.append(name)

    model = ex.MuddPythia.from_pretrained(folder)
    fx = ex.fca_adapter.read_safetensors_file(os.path.join(folder, "fixture.safetensors"))[0]
    fx["input_ids"] = fx["input_ids"].long()
    ids = fx["input_ids"]
    print(f"model: L {model.L}, D {model.D}, H {model.H}, V {model.V}, {model.parameter_count()} parameters; "
          f"ids {list(ids.shape)}")
    flag("parameter count 285545", model.parameter_count() == 285545, str(model.parameter_count()))

    # ---- live forward vs the fixture --------------------------------------------------------------
    before = model.controller_calls
    logits, alpha = model.forward(ids)
    flag("live run evaluates each DA generator once", model.controller_calls - before == model.L,
         f"{model.controller_calls - before} evaluations")
    check("live logits", (logits - fx["logits"]).abs().max().item(), TOL_LOGITS)
    print(f"     live logits bit-identical to the reference: {torch.equal(logits, fx['logits'])}")
    worst = 0.0
    for i in range(model.L):
        ours = alpha[:, i, :, :model.C[i], :i + 2].permute(2, 0, 1, 3)      # -> [C_i, B, T, i+2]
        worst = max(worst, (ours - fx[f"alpha.{i}"]).abs().max().item())
    check("alpha (all layers)", worst, TOL_ALPHA)
    mask = model.coefficient_mask()[None, :, None]                          # [1, L, 1, 4, L+1]
    flag("invalid coefficient entries are exactly 0", bool((alpha[~mask.expand_as(alpha)] == 0).all()))
    lp = torch.log_softmax(logits.double(), -1)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    check("nll", (-lp.mean(1) - fx["nll"].double()).abs().max().item(), TOL_NLL)

    # ---- bit-exact same-input replay, with the generator poisoned ---------------------------------
    real_generator = model.generate_alpha
    def poisoned(*_):
        raise RuntimeError("DA generator called during replay")
    model.generate_alpha = poisoned
    before = model.controller_calls
    try:
        replay_logits, replay_alpha = model.forward(ids, alpha.clone())
        flag("replay never calls the generator", model.controller_calls == before)
        flag("replay of recorded alpha is bit-exact (torch.equal)", torch.equal(replay_logits, logits),
             f"max |diff| = {(replay_logits - logits).abs().max().item():.3e}")
        flag("replay returns the given coefficients", torch.equal(replay_alpha, alpha))
        # ---- replays driven by the stored reference alphas ----------------------------------------
        stored = {i: fx[f"alpha.{i}"] for i in range(model.L)}
        perm = fx["shuffle_perm"].long()
        B = ids.shape[0]
        variants = {
            "exact": stored,
            "cross": {i: a[:, [(b + 1) % B for b in range(B)]] for i, a in stored.items()},
            "shuffle": {i: a[:, :, perm] for i, a in stored.items()},
            "static": {i: a.mean(dim=(1, 2), keepdim=True).expand_as(a) for i, a in stored.items()},
        }
        for name, per_layer in variants.items():
            out, _ = model.forward(ids, pad(model, per_layer))
            check(f"replay_{name} logits (stored alphas)", (out - fx[f"replay_{name}.logits"]).abs().max().item(),
                  TOL_REPLAY)
    except RuntimeError as e:
        flag("replay never calls the generator", False, str(e))
    finally:
        model.generate_alpha = real_generator

    # ---- other checkpoint forms give bit-identical logits ------------------------------------------
    bf16 = ex.MuddPythia(model.config, ex.fca_adapter.read_safetensors_file(os.path.join(folder, "model-bf16.safetensors"))[0])
    flag("BF16 checkpoint: bit-identical logits", torch.equal(bf16.forward(ids)[0], logits))
    sharded = os.path.join(args.testdata, "muddpythia-tiny-sharded")
    if os.path.isdir(sharded):
        flag("sharded checkpoint: bit-identical logits",
             torch.equal(ex.MuddPythia.from_pretrained(sharded).forward(ids)[0], logits))

    # ---- the adapter wrapper (when python/fca_adapter is present) --------------------------------
    if ex.fca_adapter is not None:
        adapter = ex.MuddAdapter(folder)
        d = adapter.describe()
        flag("describe: shapes", (d.layers, d.streams, d.sources, d.vocab) == (4, 4, 5, 512)
             and tuple(d.mask.shape) == (4, 4, 5) and tuple(d.identity.shape) == (4, 4, 5))
        with torch.inference_mode():
            a_logits, record = adapter.forward(ids)
            n = adapter._controller_evaluations
            r_logits, _ = adapter.forward(ids, record)
        flag("adapter: live counts 4 controller evaluations, replay 0",
             n == 4 and adapter._controller_evaluations == n)
        flag("adapter: live and replay bit-exact", torch.equal(a_logits, r_logits) and torch.equal(a_logits, logits))
        protocol_round_trip(ex.fca_adapter, folder, ids, logits, flag)
        with tempfile.TemporaryDirectory() as tmp:     # a folder with a BPE tokenizer is refused
            for name in ("config.json", "model.safetensors"):
                os.symlink(os.path.join(folder, name), os.path.join(tmp, name))
            open(os.path.join(tmp, "tokenizer.json"), "w").close()
            try:
                ex.MuddAdapter(tmp)
                flag("adapter refuses a folder with tokenizer.json", False)
            except ValueError as e:
                flag("adapter refuses a folder with tokenizer.json", "byte-level" in str(e))
    else:
        print("skip adapter checks: python/fca_adapter not found")

    print("FAILED: " + ", ".join(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
