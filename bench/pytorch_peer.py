"""The PyTorch side of the side-by-side benchmarks (compare_pytorch.py, compare_audit_pytorch.py).

Two things a fair comparison needs from PyTorch:

1. Its best CPU implementation in Debian's torch 1.13 (no scaled_dot_product_attention, no fused
   AdamW, no torch.compile):
   - GatedPeer: the gated byte-level family (fca-gated-v1). Every Linear is F.linear (the bias
     fused into the GEMM's output), attention is one batched matmul per layer with the causal mask
     and the 1/sqrt(dh) scale folded into it (torch.baddbmm), a softmax and a second batched matmul;
     no Python loop over heads or tokens. Only live featuregate passes compute attention
     statistics, and they reuse the softmax's own tensors. The residual update is one addcmul.
   - MuddPeer: examples/mudd_adapter.py's MuddPythia with the DA mixing vectorised over the
     streams (below).
   Both scripts check the peers against the repository's reference implementations numerically
   before they time anything.
2. A record of what each side runs, and the rule that both run the same instruction set on the
   same number of threads: torch_runtime(), fca_runtime() and fairness_problems().
"""

import ctypes
import math
import os
import re
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import mudd_adapter  # noqa: E402  (the repository's PyTorch MUDDPythia)

# ------------------------------------------------------------------------------------------------
# What each side runs.

# The environment variables that pick kernels for one engine only: OpenBLAS reads OPENBLAS_CORETYPE
# when it loads (PyTorch's float GEMMs; in fca only the double GEMMs and the SGEMM peak probe,
# docs/building.md), ATen reads ATEN_CPU_CAPABILITY (PyTorch's vectorised kernels; fca has no
# equivalent). The scripts never set or unset them: both sides run with the caller's environment.
FORCING_VARIABLES = ("OPENBLAS_CORETYPE", "ATEN_CPU_CAPABILITY")

# Instruction sets, named by their widest float vectors. OpenBLAS's DYNAMIC_ARCH core names (x86-64)
# -> the instruction set of that core's SGEMM kernel.
OPENBLAS_ISA = {
    "skylakex": "AVX-512", "cooperlake": "AVX-512", "sapphirerapids": "AVX-512",
    "haswell": "AVX2", "zen": "AVX2",
    "sandybridge": "AVX", "bulldozer": "AVX", "piledriver": "AVX", "steamroller": "AVX", "excavator": "AVX",
    "nehalem": "SSE", "core2": "SSE", "penryn": "SSE", "dunnington": "SSE", "atom": "SSE", "nano": "SSE",
    "barcelona": "SSE", "bobcat": "SSE", "opteron": "SSE", "opteron(sse3)": "SSE", "prescott": "SSE",
}
# An OpenBLAS core per instruction set, for OPENBLAS_CORETYPE.
OPENBLAS_CORE_FOR = {"AVX-512": "SkylakeX", "AVX2": "Haswell", "AVX": "Sandybridge", "SSE": "Nehalem"}
# ATen's CPU capabilities (x86-64), as torch 1.13's build summary ("NO AVX") or later torch's
# get_cpu_capability() ("DEFAULT") name them; the default is code built for the x86-64 baseline.
ATEN_ISA = {"AVX512": "AVX-512", "AVX2": "AVX2", "NO AVX": "SSE", "DEFAULT": "SSE"}
# ATEN_CPU_CAPABILITY's value per instruction set. torch 1.13 dispatches to AVX2 on AVX-512 CPUs
# unless ATEN_CPU_CAPABILITY=avx512: since 1.12 its AVX-512 kernels are opt-in (pytorch#80253).
ATEN_CAPABILITY_FOR = {"AVX-512": "avx512", "AVX2": "avx2", "SSE": "default"}


def onednn_isa(isa):
    """The instruction-set family of a oneDNN ISA name as fca's provenance writes it (avx512_core,
    avx512_core_amx, avx2, ...), or None for one this table does not know."""
    if isa.startswith("avx512"):
        return "AVX-512"
    if isa.startswith("avx2"):
        return "AVX2"
    return {"avx": "AVX", "sse41": "SSE"}.get(isa)


def highway_isa(target):
    """The instruction set of a Highway target name as fca's provenance writes it (AVX3, AVX3_ZEN4,
    AVX3_SPR, AVX2, SSE4, ...), or None for one this table does not know."""
    if target.startswith("AVX3"):
        return "AVX-512"
    return {"AVX2": "AVX2", "SSE4": "SSE", "SSSE3": "SSE", "SSE2": "SSE"}.get(target)


def _openblas_in_process():
    """(the BLAS libraries this process has mapped, 'OpenBLAS <version> <core>', core): PyTorch's
    BLAS on Debian is libblas.so.3, OpenBLAS's shim over libopenblas. The core is None when no
    mapped library is OpenBLAS. dlopen of a mapped library returns the loaded instance, so the core
    is the one it chose when it loaded."""
    with open("/proc/self/maps") as f:
        paths = sorted({line.split()[5] for line in f
                        if len(line.split()) >= 6 and "blas" in os.path.basename(line.split()[5])})
    for path in sorted(paths, key=lambda p: "openblas" not in os.path.basename(p)):   # libopenblas first
        lib = ctypes.CDLL(path)
        if hasattr(lib, "openblas_get_corename"):
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_config.restype = ctypes.c_char_p
            core = lib.openblas_get_corename().decode()
            version = " ".join(lib.openblas_get_config().decode().split()[:2])  # "OpenBLAS 0.3.21"
            return paths, f"{version} {core}", core
    return paths, None, None


def _aten_capability():
    """ATen's CPU capability in use (AVX512, AVX2, NO AVX, ...). torch 1.13 has no
    torch.backends.cpu.get_cpu_capability(); its build summary names the capability it dispatches to."""
    backend = getattr(torch.backends, "cpu", None)
    if backend is not None and hasattr(backend, "get_cpu_capability"):
        return backend.get_cpu_capability()
    match = re.search(r"CPU capability usage: (.+)", torch.__config__.show())
    return match.group(1).strip() if match else None


def torch_runtime():
    """What the PyTorch side runs, in this process (after torch.set_num_threads)."""
    blas_paths, openblas, core = _openblas_in_process()
    capability = _aten_capability()
    return {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "environment": {name: os.environ.get(name) for name in FORCING_VARIABLES},
        "aten_cpu_capability": capability,
        "vector_isa": ATEN_ISA.get(capability),
        "blas_libraries": blas_paths,
        "sgemm": openblas,                     # PyTorch's float GEMMs (F.linear, bmm) are BLAS calls
        "openblas_core": core,
        "sgemm_isa": OPENBLAS_ISA.get(core.lower()) if core else None,
    }


def fca_runtime(provenance):
    """What fca ran, from the provenance object of one of its outputs (trace metadata, bench --json,
    audit.json), whose `build` reads e.g. "...; simd AVX3; sgemm oneDNN 2.6.3 (cpu isa avx512_core_amx)
    where N and K >= 64, fca tile_matmul AVX3 otherwise; dgemm OpenBLAS 0.3.21 Cooperlake (detected)"
    ("(OPENBLAS_CORETYPE=Haswell)" when the variable was set)."""
    build = provenance.get("build", "")
    parts = dict(part.split(" ", 1) for part in build.split("; ") if " " in part)
    simd, sgemm, dgemm = parts.get("simd", ""), parts.get("sgemm", ""), parts.get("dgemm", "")
    dgemm_match = re.fullmatch(r"(OpenBLAS \S+) (\S+) \((.*)\)", dgemm)
    core = dgemm_match.group(2) if dgemm_match else None
    source = dgemm_match.group(3) if dgemm_match else ""
    # fca's float GEMM is oneDNN's where N and K >= 64 ("[bf16 ]oneDNN <version> (cpu isa <isa>) ...",
    # the rest on its own Highway kernel); older builds ran their Highway kernel alone ("fca
    # tile_matmul <target>") or OpenBLAS's ("OpenBLAS <version> <core> (<source>)").
    sgemm_match = re.fullmatch(r"OpenBLAS \S+ (\S+) \(.*\)", sgemm)
    onednn_match = re.search(r"oneDNN \S+ \(cpu isa (\S+)\)", sgemm)
    if sgemm_match:
        sgemm_isa = OPENBLAS_ISA.get(sgemm_match.group(1).lower())
    elif onednn_match:
        sgemm_isa = onednn_isa(onednn_match.group(1))
    else:
        sgemm_isa = highway_isa(sgemm.split()[-1]) if sgemm else None
    return {
        "fca": f"{provenance.get('fca_version', '?')} (commit {provenance.get('git_commit', '?')})",
        "threads": provenance.get("threads"),
        "build": build,
        # fca records OPENBLAS_CORETYPE with its OpenBLAS (dgemm) and reads no ATEN_CPU_CAPABILITY.
        "environment": {"OPENBLAS_CORETYPE": source.split("=", 1)[1] if source.startswith("OPENBLAS_CORETYPE=") else None},
        "simd": simd,
        "vector_isa": highway_isa(simd),
        "sgemm": sgemm,
        "sgemm_isa": sgemm_isa,
        "dgemm": dgemm,
        "openblas_core": core,
    }


def describe_runtime(side, rt):
    """One line for a table header."""
    if side == "PyTorch":
        env = ", ".join(f"{k}={v}" for k, v in rt["environment"].items() if v is not None) or "no kernel variables set"
        return (f"PyTorch {rt['torch']}, {rt['threads']} threads: ATen {rt['aten_cpu_capability']} ({rt['vector_isa']}), "
                f"SGEMM {rt['sgemm'] or rt['blas_libraries']} ({rt['sgemm_isa']}); {env}")
    forced = rt["environment"]["OPENBLAS_CORETYPE"]
    return (f"fca {rt['fca']}, {rt['threads']} threads: simd {rt['simd']} ({rt['vector_isa']}), "
            f"sgemm {rt['sgemm']} ({rt['sgemm_isa']}), dgemm {rt['dgemm']}; "
            f"{'OPENBLAS_CORETYPE=' + forced if forced else 'no kernel variables set'}")


def fairness_problems(pt, fca):
    """Why the two sides would not run at the same instruction set on the same threads ([] when they do).

    A kernel variable forces one side only when the sides saw different values, and also when only
    one side's kernels read it: OPENBLAS_CORETYPE picks PyTorch's float GEMMs but not fca's (its
    own kernel, at the CPU's widest vectors), ATEN_CPU_CAPABILITY picks ATen's kernels and nothing
    in fca. So the rule is checked on what each side ran: the same OPENBLAS_CORETYPE and OpenBLAS
    core on both sides, and the same instruction set for the float GEMMs and for the vectorised
    kernels around them. A variable that brings PyTorch to fca's instruction set passes (torch
    1.13 needs ATEN_CPU_CAPABILITY=avx512 for its AVX-512 kernels); one that takes it elsewhere
    does not. And both sides must run the same number of threads: PyTorch's intra-op threads
    (torch.get_num_threads()) and fca's (its provenance's `threads`)."""
    problems = []
    if pt["threads"] != fca["threads"]:
        problems.append(f"different thread counts: PyTorch runs {pt['threads']} (torch.get_num_threads()), fca "
                        f"{fca['threads']} (its provenance); both must run the script's --threads")
    ours, theirs = pt["environment"]["OPENBLAS_CORETYPE"], fca["environment"]["OPENBLAS_CORETYPE"]
    if ours != theirs:
        problems.append(f"OPENBLAS_CORETYPE is set for one side only: PyTorch ran with {ours or 'it unset'}, "
                        f"fca with {theirs or 'it unset'} (both must run in the same environment)")
    if pt["openblas_core"] and fca["openblas_core"] and pt["openblas_core"] != fca["openblas_core"]:
        problems.append(f"the same OpenBLAS chose different kernels: {pt['openblas_core']} in PyTorch, "
                        f"{fca['openblas_core']} in fca (a different environment for one side)")
    if pt["sgemm_isa"] is None or pt["sgemm_isa"] != fca["sgemm_isa"]:
        cause = (f"OPENBLAS_CORETYPE={ours} picks them for PyTorch only (fca's float GEMM is its own kernel, "
                 f"which the variable does not reach): unset it (`env -u OPENBLAS_CORETYPE ...`) or set it to "
                 f"{OPENBLAS_CORE_FOR.get(fca['sgemm_isa'], '?')} ({fca['sgemm_isa']} kernels)"
                 if ours else
                 f"OpenBLAS detected this CPU as {pt['openblas_core']}; OPENBLAS_CORETYPE="
                 f"{OPENBLAS_CORE_FOR.get(fca['sgemm_isa'], '?')} for both sides runs {fca['sgemm_isa']} kernels"
                 if pt["sgemm_isa"] else "PyTorch's BLAS is not an OpenBLAS whose kernels this script knows")
        problems.append(f"float GEMMs at different instruction sets: PyTorch: {pt['sgemm'] or pt['blas_libraries']} "
                        f"({pt['sgemm_isa'] or 'unknown'}); fca: {fca['sgemm']} ({fca['sgemm_isa'] or 'unknown'}); {cause}")
    if pt["vector_isa"] is None or pt["vector_isa"] != fca["vector_isa"]:
        forced = pt["environment"]["ATEN_CPU_CAPABILITY"]
        wanted = ATEN_CAPABILITY_FOR.get(fca["vector_isa"], "?")
        cause = (f"ATEN_CPU_CAPABILITY={forced} takes PyTorch elsewhere (fca reads no such variable); "
                 f"{wanted} would match fca" if forced else
                 f"ATen chose {pt['aten_cpu_capability']} itself; ATEN_CPU_CAPABILITY={wanted} runs its "
                 f"{fca['vector_isa']} kernels, where this torch was built with them")
        problems.append(f"vectorised kernels at different instruction sets: PyTorch: ATen {pt['aten_cpu_capability']} "
                        f"({pt['vector_isa'] or 'unknown'}); fca: simd {fca['simd']} ({fca['vector_isa'] or 'unknown'}); {cause}")
    return problems


# ------------------------------------------------------------------------------------------------
# The gated family.

LN_EPS = 1e-5
NORM_EPS = 1e-6                      # phi_3 = ||F|| / (||h|| + 1e-6)
# The causal mask as an additive bias folded into the score GEMM. Finite, unlike the references'
# -inf: a masked score s - 1e30 still underflows to p = 0 exactly (so the unmasked probabilities
# have the same bits as with -inf), while its log-probability stays finite, so that the statistics
# can form p log p over whole rows (0 * finite = 0) without a masking pass of their own.
MASK_BIAS = -1e30
BLOCK_TENSORS = ("ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
                 "attn.proj.bias", "ln2.weight", "ln2.bias", "mlp.fc.weight", "mlp.fc.bias",
                 "mlp.proj.weight", "mlp.proj.bias")


class _Peer:
    """What the peers share: the parameters as leaves, and the additive causal masks per T."""

    def parameters(self):
        return list(self.P.values())

    def _mask(self, T):
        if T not in self.masks:
            self.masks[T] = torch.full((T, T), MASK_BIAS).triu(1)
        return self.masks[T]


class GatedPeer(_Peer):
    """The gated family's forward pass (docs/model.md), float32.

    tests/fixtures/gated_reference.py and examples/gated_adapter.py already batch attention over
    heads and tokens (no Python loop but the one over layers); this peer drops what they spend
    beyond that: log_softmax then exp under every gate (log-probabilities that only featuregate's
    statistics read), a separate pass per bias and for the mask, and statistics that re-mask the
    probabilities and reduce the scores again for their logsumexp. About 20% of a forward pass at
    the default shape (one thread, measured on a noisy machine).

    forward(x, gates=None): x [B, T] byte ids; gates None runs the gate (live), or [B, L, T] replays
    those gates without running it. Returns (logits [B, T, V], gates used [B, L, T]).

    replays: whether forward will also replay recorded gates, which must then reproduce the live
    logits bit for bit (the audit). Live featuregate passes then weight the values with softmax(s),
    as replays do, and take log_softmax(s) for the statistics beside it; without replays they take
    p = exp(log_softmax(s)), one pass over the scores fewer.
    """

    def __init__(self, config, params, requires_grad=False, replays=False, on_controller=None):
        self.L, self.D, self.H = config["n_layer"], config["d_model"], config["n_head"]
        self.gate, self.gate_value = config["gate"], float(config.get("gate_value", 0.6))
        self.replays = replays
        self.on_controller = on_controller   # called once per live gate evaluation
        self.P = {n: t.detach().float().clone().requires_grad_(requires_grad) for n, t in params.items()}
        self.blocks = [tuple(self.P[f"blocks.{l}.{name}"] for name in BLOCK_TENSORS) for l in range(self.L)]
        self.masks = {}                      # T -> the [T, T] additive causal mask

    def forward(self, x, gates=None):
        P, L, D, H = self.P, self.L, self.D, self.H
        B, T = x.shape
        dh = D // H
        stats = gates is None and self.gate == "featuregate"
        mask, scale = self._mask(T), 1.0 / math.sqrt(dh)
        h = F.embedding(x, P["wte"]) + P["wpe"][:T]
        used, prev_logp = [], None
        for l in range(L):
            ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, mprojw, mprojb = self.blocks[l]
            a = F.layer_norm(h, (D,), ln1w, ln1b, LN_EPS)
            qkv = F.linear(a, qkvw, qkvb).view(B, T, 3, H, dh).permute(2, 0, 3, 1, 4).reshape(3, B * H, T, dh)
            s = torch.baddbmm(mask, qkv[0], qkv[1].transpose(1, 2), alpha=scale)    # [B H, T, T], masked
            if stats:
                logp = torch.log_softmax(s, dim=-1)
                p = torch.softmax(s, dim=-1) if self.replays else logp.exp()
            else:
                p = torch.softmax(s, dim=-1)
            y = torch.bmm(p, qkv[2]).view(B, H, T, dh).transpose(1, 2).reshape(B, T, D)
            u = F.linear(y, projw, projb)
            m = F.layer_norm(h + u, (D,), ln2w, ln2b, LN_EPS)
            upd = u + F.linear(F.gelu(F.linear(m, fcw, fcb), approximate="tanh"), mprojw, mprojb)  # F_l
            if gates is not None:
                g = gates[:, l]
            else:
                g = self._gate(l, B, T, self._features(s, logp, p, prev_logp, upd, h, B, T) if stats else None)
                if stats:
                    prev_logp = logp
            used.append(g)
            h = torch.addcmul(h, g.unsqueeze(-1), upd)
        logits = F.linear(F.layer_norm(h, (D,), P["ln_f.weight"], P["ln_f.bias"], LN_EPS), P["wte"])
        return logits, torch.stack(used, dim=1)

    def _gate(self, l, B, T, phi):
        if self.on_controller is not None:
            self.on_controller()
        if self.gate == "dense":
            return torch.ones(B, T)
        if self.gate == "fixed":
            return torch.full((B, T), self.gate_value)
        if self.gate == "uniform":
            return torch.sigmoid(self.P["gate.logit"][0]).expand(B, T)
        if self.gate == "layerstatic":
            return torch.sigmoid(self.P["gate.logit"][l]).expand(B, T)
        return torch.sigmoid(self.P["gate.bias"][l] + phi @ self.P["gate.weight"][l])

    @torch.no_grad()
    def _features(self, s, logp, p, prev_logp, upd, h, B, T):
        """featuregate's phi [B, T, 4] (stop-gradient), each averaged over heads: normalised attention
        entropy, KL to the previous layer's attention (0 at layer 0), logsumexp of the scores minus
        log(t+1), and ||F|| / (||h|| + 1e-6). s, logp, p: [B H, T, T] with the finite mask."""
        H = self.H
        per_head = lambda t: t.view(B, H, T).mean(1)                            # [B H, T] -> [B, T]
        log_n = torch.log(torch.arange(1, T + 1, dtype=torch.float32))           # log(t + 1)
        plogp = (p * logp).sum(-1)                                               # -entropy per head
        phi0 = -per_head(plogp) / torch.cat([log_n.new_ones(1), log_n[1:]])
        phi0[:, 0] = 0.0
        phi1 = torch.zeros_like(phi0) if prev_logp is None else per_head((p * (logp - prev_logp)).sum(-1))
        # logsumexp_u s[t, u] = s[t, u] - logp[t, u] for any unmasked u; the diagonal always is.
        lse = s.diagonal(dim1=-2, dim2=-1) - logp.diagonal(dim1=-2, dim2=-1)
        phi2 = per_head(lse) - log_n
        phi3 = upd.norm(dim=-1) / (h.norm(dim=-1) + NORM_EPS)
        return torch.stack([phi0, phi1, phi2, phi3], dim=-1)


# ------------------------------------------------------------------------------------------------
# MUDD.

class MuddPeer(mudd_adapter.MuddPythia):
    """MuddPythia with the dynamic dense mixing vectorised over the streams.

    The example mixes with a Python double loop over streams c and sources j, a multiply and an add
    per (c, j) over a [B, T, D] tensor. Here the C_i streams are one [C_i, B, T, D] tensor, built by
    one multiply and i+1 in-place addcmuls, one per source, in the example's order j = 0..i+1
    (the definition's sequential sum). Measured at L4 D128 T128 B16 on one thread: 1.3 ms per layer
    against the double loop's 2.3 ms and 7 ms for torch.einsum / matmul, which lower this
    contraction to one [C, S] x [S, D] GEMM per token (B T GEMM calls of 4 x 5 x 128).
    Everything else (blocks, attention, the DA generator) is the example's."""

    @torch.inference_mode()
    def forward(self, ids, alpha=None):
        """As MuddPythia.forward: live (alpha None) records alpha [B, L, T, 4, L+1]; replay uses the
        given one without running any generator, with the same arithmetic, so it is bit-exact."""
        B, T = ids.shape
        if T > self.block_size:
            raise ValueError(f"{T} tokens exceed block_size {self.block_size} (the RoPE table)")
        live = alpha is None
        if live:
            alpha = torch.zeros(B, self.L, T, 4, self.L + 1, dtype=torch.float32)
        X = [F.embedding(ids, self.w["tok_embeddings.weight"])]           # sources X_0.., each [B, T, D]
        streams = [X[0]] * 4
        for i in range(self.L):
            X.append(self._block(i, *streams))
            C, S = self.C[i], i + 2
            if live:
                alpha[:, i, :, :C, :S] = self.generate_alpha(i, X[-1])
            coef = alpha[:, i, :, :C, :S].permute(2, 3, 0, 1).unsqueeze(-1)   # [C, S, B, T, 1]
            Y = coef[:, 0] * X[0]                                             # [C, B, T, D]
            for j in range(1, S):
                Y.addcmul_(coef[:, j], X[j])
            streams = Y.unbind(0)
        logits = F.linear(self._ln(streams[0], "norm"), self.w["output.weight"])
        return logits, alpha


# ------------------------------------------------------------------------------------------------
# Hyper-connections.

HC_BLOCK_TENSORS = BLOCK_TENSORS


class HyperPeer(_Peer):
    """The hyper-connection family's forward pass (docs/hyper.md, fca-hyper-v1),
    float32, at its fastest in torch 1.13.

    tests/fixtures/hyper_reference.py builds the whole (n+1) x (n+1) square per site and token (mHC's
    logits entry by entry in a Python double loop) and mixes with einsum. This peer keeps the three
    parts of the square apart (read weights [B, T, n], write weights [B, T, n], mixing [B, T, n, n]),
    forms mHC's logits with one multiply-add over the controller's output (the scale of each entry's
    group and the static logits as [E] vectors), and mixes as MuddPeer does: one multiply and n
    in-place addcmuls over the [B, T, n, D] streams (einsum lowers these contractions to B T tiny
    GEMMs). SHC's coefficients do not depend on the token, so it never expands them. Attention and
    the Linear layers are GatedPeer's (F.linear with fused bias, one masked baddbmm per layer).

    forward(x) -> logits [B, T, V]; with requires_grad the parameters are leaves for a training step.
    """

    def __init__(self, config, params, requires_grad=False):
        self.c = config
        self.L, self.D, self.H, self.n = config["n_layer"], config["d_model"], config["n_head"], config["hc_streams"]
        self.variant = config["hc_variant"]
        self.P = {k: t.detach().float().clone().requires_grad_(requires_grad) for k, t in params.items()}
        self.blocks = [tuple(self.P[f"blocks.{l}.{name}"] for name in HC_BLOCK_TENSORS) for l in range(self.L)]
        self.masks = {}
        n = self.n
        if self.variant == "mhc":
            # Valid entries e(s, k) in row-major order with (0, 0) skipped: row 0 (read) k = 1..n,
            # then rows s = 1..n with k = 0 (write) and k = 1..n (mixing). Group of each entry:
            # 0 read, 1 write, 2 mixing (the index of its scale).
            self.group = torch.tensor([0] * n + ([1] + [2] * n) * n)
            self.valid = torch.tensor([k for k in range(1, n + 1)] +
                                      [s * (n + 1) + k for s in range(1, n + 1) for k in range(n + 1)])

    def _coefficients(self, p, X):
        """(read [.., n], write [.., n], mix [.., n (target), n (source)]) of site p from the streams
        X [B, T, n, D]; SHC's without the token dimensions."""
        c, n, D = self.c, self.n, self.D
        st = self.P[f"hc.{p}.static"]
        if self.variant == "shc":
            return st[0, 1:], st[1:, 0], st[1:, 1:]
        if self.variant == "dhc":
            tau = F.linear(F.layer_norm(X, (D,), None, None, LN_EPS), self.P[f"hc.{p}.dyn.weight"])  # [B, T, n, n+2]
            if c["hc_tanh"]:
                tau = torch.tanh(tau)
            s_alpha, s_beta = self.P[f"hc.{p}.dyn.scale"].unbind(0)
            read = st[0, 1:] + s_alpha * tau[..., 0]
            mix = st[1:, 1:] + s_alpha * tau[..., 1:n + 1].transpose(-1, -2)                      # [j, i] = tau_i[1 + j]
            write = st[1:, 0] + s_beta * tau[..., n + 1]
            return read, write, mix
        B, T = X.shape[:2]
        v = X.reshape(B, T, n * D)
        r = torch.sqrt(v.pow(2).mean(dim=-1, keepdim=True) + c["hc_norm_eps"])
        u = F.linear(v, self.P[f"hc.{p}.dyn.weight"]) / r                                          # [B, T, E]
        z = u * self.P[f"hc.{p}.dyn.scale"][self.group] + st.reshape(-1)[self.valid]
        read = torch.sigmoid(z[..., :n]) + c["hc_eps"]
        rows = z[..., n:].view(B, T, n, n + 1)
        write = 2 * torch.sigmoid(rows[..., 0])
        M = torch.softmax(rows[..., 1:], dim=-2) + c["hc_eps"]                                     # Sinkhorn, docs/hyper.md
        M = M / (M.sum(dim=-1, keepdim=True) + c["hc_eps"])
        for _ in range(c["hc_sinkhorn_iters"] - 1):
            M = M / (M.sum(dim=-2, keepdim=True) + c["hc_eps"])
            M = M / (M.sum(dim=-1, keepdim=True) + c["hc_eps"])
        return read, write, M

    def forward(self, x):
        P, L, D, H, n = self.P, self.L, self.D, self.H, self.n
        B, T = x.shape
        dh = D // H
        mask, scale = self._mask(T), 1.0 / math.sqrt(dh)
        x0 = F.embedding(x, P["wte"]) + P["wpe"][:T]
        X = x0.unsqueeze(2).expand(B, T, n, D)
        for p in range(2 * L):
            ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, mprojw, mprojb = self.blocks[p // 2]
            read, write, mix = self._coefficients(p, X)
            a = read[..., 0, None] * X[:, :, 0]
            for i in range(1, n):
                a.addcmul_(read[..., i, None], X[:, :, i])
            if p % 2 == 0:
                m = F.layer_norm(a, (D,), ln1w, ln1b, LN_EPS)
                qkv = F.linear(m, qkvw, qkvb).view(B, T, 3, H, dh).permute(2, 0, 3, 1, 4).reshape(3, B * H, T, dh)
                s = torch.baddbmm(mask, qkv[0], qkv[1].transpose(1, 2), alpha=scale)
                y = torch.bmm(torch.softmax(s, dim=-1), qkv[2]).view(B, H, T, dh).transpose(1, 2).reshape(B, T, D)
                Fb = F.linear(y, projw, projb)
            else:
                m = F.layer_norm(a, (D,), ln2w, ln2b, LN_EPS)
                Fb = F.linear(F.gelu(F.linear(m, fcw, fcb), approximate="tanh"), mprojw, mprojb)
            # X'[j] = write[j] F + sum_i mix[j, i] X[i], over all n new streams at once.
            Xn = write[..., None] * Fb.unsqueeze(2)
            for i in range(n):
                Xn.addcmul_(mix[..., :, i, None], X[:, :, i:i + 1])
            X = Xn
        h = X.sum(dim=2)
        return F.linear(F.layer_norm(h, (D,), P["ln_f.weight"], P["ln_f.bias"], LN_EPS), P["wte"])
