"""Seeds for fuzz/fuzz_adapter_protocol.cpp: what real fca_adapter adapters write to their stdout
when they are sent that target's requests, in its order (describe; tokenize of the test split for
an "ids" tokenizer; run_live of 2 windows of max_tokens; run_replay of what live recorded;
exec_prepare; one counted exec_pass per offered mode; exec_time), one file per adapter.

    fuzz_adapter_seeds.py OUT_DIR

The adapters: hooked third-party styles of tests/external (continuous records, MUDD's masked
multi-stream one, a hooked top-2 MoE router with exec units) and hand-written adapters of the
routing records (expert_routing; token_selection with its own tokenizer); then the MUDD session
with unaligned tensors, and an error answer. Python 3 with torch.
"""

import io
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "external"))
import fca_adapter  # noqa: E402
import exec_models  # noqa: E402
import hooked_models  # noqa: E402

BATCH = 2  # the target's kBatch


def request(type_, tensors=None, **meta):
    blob = fca_adapter.encode_safetensors(tensors or {}, dict(meta, type=type_, protocol=fca_adapter.PROTOCOL))
    return struct.pack("<Q", len(blob)) + blob


def converse(adapter, requests):
    """(the adapter's whole output, its answers decoded) for these requests, from a fresh session."""
    out = io.BytesIO()
    stdout = sys.stdout
    fca_adapter.serve(adapter, io.BytesIO(b"".join(requests)), out)
    sys.stdout = stdout  # serve points it at stderr
    raw, answers, at = out.getvalue(), [], 0
    while at < len(raw):
        (n,) = struct.unpack("<Q", raw[at:at + 8])
        answers.append(fca_adapter.decode_safetensors(raw[at + 8:at + 8 + n], "answer"))
        at += 8 + n
    if answers[-1][1]["type"] == "error":
        raise RuntimeError(answers[-1][1]["message"])
    return raw, answers


def transcript(adapter):
    requests = [request("describe")]
    _, answers = converse(adapter, requests)
    d = answers[0][1]
    T, vocab = int(d["max_tokens"]), int(d["vocab"])
    text = bytes(np.random.default_rng(1).integers(0, 256, 4 * BATCH * T, dtype=np.uint8))
    if d["tokenizer"] == "ids":
        requests.append(request("tokenize", {"text": np.frombuffer(text, np.uint8)}, split="test"))
        _, answers = converse(adapter, requests)
        ids = answers[-1][0]["ids"]
    else:
        ids = np.frombuffer(text, np.uint8).astype(np.int32) % vocab
    windows = ids[: (BATCH + 2) * T + 1]
    inputs = windows[: BATCH * T].reshape(BATCH, T).astype(np.int32)
    targets = windows[1: BATCH * T + 1].reshape(BATCH, T).astype(np.int32)
    calibration = windows[BATCH * T: (BATCH + 2) * T].reshape(2, T).astype(np.int32)
    run = {"inputs": inputs, "targets": targets}
    requests.append(request("run_live", run))
    _, answers = converse(adapter, requests)
    live = answers[-1][0]
    handed = dict(run, coefficients=live["coefficients"])
    if "discrete" in live:
        handed["discrete"] = live["discrete"]
    requests += [request("run_replay", handed), request("exec_prepare", {"inputs": inputs, "calibration": calibration})]
    _, answers = converse(adapter, requests)
    modes = [m["mode"] for m in json.loads(answers[-1][1]["modes"])]
    requests += [request("exec_pass", run, mode=m, count="1") for m in modes] + [request("exec_time", mode="live")]
    return converse(adapter, requests)[0]


class RoutedAdapter(fca_adapter.Adapter):
    """A hand-written adapter of routing records over a tiny model: expert_routing (top-2 of 4
    experts per layer, the values their weights) or token_selection (the top half of the tokens per
    layer, the values their sigmoid scores), byte ids or its own tokenizer (byte pairs, vocab 300)."""

    L, D, T, E, K = 2, 8, 8, 4, 2

    def __init__(self, kind, tokenizer="bytes"):
        super().__init__()
        torch.manual_seed(7)
        self.kind, self.tokenizer = kind, tokenizer
        self.vocab = 300 if tokenizer == "ids" else 256
        E = self.E if kind == "expert_routing" else 1
        self.model = nn.ModuleDict({"embed": nn.Embedding(self.vocab, self.D), "head": nn.Linear(self.D, self.vocab),
                                    "router": nn.ModuleList(nn.Linear(self.D, E) for _ in range(self.L)),
                                    "experts": nn.ModuleList(nn.Linear(self.D, self.D) for _ in range(self.L * E))})
        self.executed = {"blocks": "experts.*"}

    def describe(self):
        routing = self.kind == "expert_routing"
        return fca_adapter.Description(
            family="fuzz-" + self.kind, description=f"fuzz seed {self.kind}", model_sha256="0" * 64, vocab=self.vocab,
            max_tokens=self.T, layers=self.L, sources=self.K if routing else 1, record_kind=self.kind,
            slots=self.K if routing else 1, categories=self.E if routing else 0, selected=0 if routing else self.T // 2,
            static_profile="RouteMean", structure_removed="RandomRoutes", tokenizer=self.tokenizer)

    def tokenize(self, text):
        return [256 + (a + b) % 44 if a < 32 else a for a, b in zip(text, text[1:] + b"\0")]

    def forward(self, ids, coefficients=None):
        x = self.model["embed"](ids)
        B, T, _ = x.shape
        values, discrete = [], []
        for l in range(self.L):
            if coefficients is None:
                self.count_controller()
                scores = self.model["router"][l](x)
                if self.kind == "expert_routing":
                    w, idx = torch.softmax(scores, -1).topk(self.K, dim=-1)                  # [B, T, K]
                else:
                    w = torch.sigmoid(scores)                                                # [B, T, 1]
                    idx = torch.zeros(B, T, 1, dtype=torch.int64).scatter(1, w.topk(T // 2, dim=1).indices, 1)
            else:
                w, idx = coefficients.values[:, l, :, 0, :], coefficients.discrete[:, l].long()
            values.append(w)
            discrete.append(idx.to(torch.int32))
            if self.kind == "expert_routing":
                update = sum(w[..., j, None] * torch.stack([self.model["experts"][l * self.E + e](x) for e in range(self.E)], -2)
                             .gather(-2, idx[..., j, None, None].expand(B, T, 1, self.D))[..., 0, :] for j in range(self.K))
            else:
                update = (w * idx) * self.model["experts"][l](x)
            x = x + update
        record = fca_adapter.Coefficients(torch.stack(values, 1)[:, :, :, None, :], torch.stack(discrete, 1))
        return self.model["head"](x), record


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    adapters = {"hooked-mudd": hooked_models.adapter("mudd"), "hooked-moe-exec": exec_models.adapter("routed"),
                "expert-routing": RoutedAdapter("expert_routing"), "token-selection-ids": RoutedAdapter("token_selection", "ids")}
    for name, adapter in adapters.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(transcript(adapter))
    # The MUDD-style session with a U8 tensor first in the run_live answer: its other tensors then
    # sit at offsets that are no multiple of 4 (valid safetensors; once a misaligned float read).
    with open(os.path.join(out, "hooked-mudd"), "rb") as seed, open(os.path.join(out, "unaligned-tensors"), "wb") as f:
        raw = seed.read()
        at = 0
        while at < len(raw):
            (n,) = struct.unpack("<Q", raw[at:at + 8])
            blob = raw[at + 8:at + 8 + n]
            at += 8 + n
            tensors, meta = fca_adapter.decode_safetensors(blob, "answer")
            if meta["type"] == "run_live":
                blob = fca_adapter.encode_safetensors(dict(note=np.array([7], np.uint8), **tensors), meta)
            f.write(struct.pack("<Q", len(blob)) + blob)
    # An adapter that fails at its first run: an error answer after a description.
    with open(os.path.join(out, "error-answer"), "wb") as f:
        with open(os.path.join(out, "hooked-mudd"), "rb") as seed:
            (n,) = struct.unpack("<Q", seed.read(8))
            f.write(struct.pack("<Q", n) + seed.read(n))
        f.write(request("error", message="RuntimeError: injected failure in forward"))


if __name__ == "__main__":
    main()
