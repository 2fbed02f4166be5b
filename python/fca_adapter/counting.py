"""What a pass executed, counted from what ran (claim 3 for an adapter's model, docs/external-protocol.md).

Two counters, both attached for one counted pass and removed after it:

- `ModuleCounter`: a forward pre-hook and a forward hook on every module of the model keep the stack
  of modules that are running, and count each module's calls and the rows each call saw. Rows of a
  call: the product of its first positional tensor argument's sizes except the last (feature) axis,
  or, without one, of its first output tensor's. An expert handed a quarter of the tokens sees a
  quarter of the rows; a block that is not called sees none; a block whose result is multiplied by
  0 saw every row.
- `FlopCounter`: a TorchDispatchMode that sees every aten operator that runs (a composite one such as
  linear, matmul or einsum as the operators it decomposes into) and gives the products a FLOP count
  by formula (multiply-add = 2),
  attributed to the innermost running module. An operator without a formula is never counted as 0
  silently: it is listed by name, either as one the convention counts as 0 (element-wise,
  reductions, normalisation, softmax, indexing, copies and views) or as uncounted.
"""

import math
from typing import Callable, Dict, List, Optional, Sequence, Set

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# -- FLOP formulas (multiply-add = 2), by the operator's overload packet name --------------------


def _mm(args, out) -> int:            # a [M, K] @ b [K, N]
    a, b = args[0], args[1]
    return 2 * a.shape[0] * a.shape[1] * b.shape[1]


def _addmm(args, out) -> int:         # bias + a [M, K] @ b [K, N]
    return _mm(args[1:], out)


def _bmm(args, out) -> int:           # a [B, M, K] @ b [B, K, N]
    a, b = args[0], args[1]
    return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]


def _baddbmm(args, out) -> int:
    return _bmm(args[1:], out)


def _mv(args, out) -> int:            # a [M, K] @ v [K]
    return 2 * args[0].shape[0] * args[0].shape[1]


def _addmv(args, out) -> int:
    return _mv(args[1:], out)


def _dot(args, out) -> int:
    return 2 * args[0].numel()


def _convolution(args, out) -> int:
    # input [N, C_in, *], weight [C_out, C_in / groups, *k] (transposed: [C_in, C_out / groups, *k]).
    x, w = args[0], args[1]
    transposed = bool(args[6]) if len(args) > 6 else False
    kernel = math.prod(w.shape[2:])
    if transposed:
        return 2 * x.numel() * w.shape[1] * kernel
    return 2 * out.numel() * w.shape[1] * kernel


def _attention(args, out) -> int:     # q [B, H, L, E], k [B, H, S, E], v [B, H, S, Ev]: QK^T and PV in full
    q, k, v = args[0], args[1], args[2]
    batch = math.prod(q.shape[:-2])
    L, E, S, Ev = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    return 2 * batch * L * S * E + 2 * batch * L * S * Ev


GEMM_FORMULAS: Dict[str, Callable] = {
    "mm": _mm, "addmm": _addmm, "_addmm_activation": _addmm, "bmm": _bmm, "baddbmm": _baddbmm,
    "mv": _mv, "addmv": _addmv, "dot": _dot, "vdot": _dot,
    "convolution": _convolution, "_convolution": _convolution,
    "_scaled_dot_product_flash_attention": _attention, "_scaled_dot_product_efficient_attention": _attention,
    "_scaled_dot_product_flash_attention_for_cpu": _attention, "_scaled_dot_product_cudnn_attention": _attention,
}

# Operators the convention counts as 0 FLOPs: data movement, views, creation, indexing, reductions,
# normalisation, softmax and element-wise arithmetic (fca counts the products; docs/exec.md). Torch
# 1.13 tags no operator pointwise, so the element-wise ones are named here.
ZERO_FLOP_OPS: Set[str] = set("""
    view _unsafe_view reshape _reshape_alias t transpose permute expand expand_as squeeze unsqueeze slice select
    split split_with_sizes unbind chunk narrow as_strided alias detach lift_fresh clone copy copy_ _to_copy to
    contiguous cat stack flatten unflatten view_as movedim repeat repeat_interleave roll flip
    zeros ones empty empty_like zeros_like ones_like full full_like new_zeros new_ones new_empty new_full fill fill_
    zero_ arange linspace scalar_tensor _local_scalar_dense item tril triu tril_ triu_ eye rand randn randint
    rand_like randn_like normal_ uniform_ bernoulli bernoulli_ native_dropout dropout
    index index_select index_put index_put_ gather scatter scatter_ scatter_add scatter_add_ masked_fill masked_fill_
    masked_select masked_scatter where nonzero embedding take index_add index_copy one_hot
    sum mean prod amax amin max min argmax argmin var std var_mean std_mean norm linalg_vector_norm
    logsumexp cumsum cumprod any all count_nonzero topk sort argsort kthvalue median unique
    _softmax _log_softmax softmax log_softmax native_layer_norm layer_norm native_group_norm native_batch_norm
    _native_batch_norm_legit _native_batch_norm_legit_no_training rms_norm _fused_rms_norm
    sym_size sym_stride sym_numel sym_storage_offset
    add sub rsub mul div neg exp exp2 log log2 log10 log1p expm1 sqrt rsqrt pow square abs sign reciprocal
    sigmoid tanh gelu silu relu relu6 leaky_relu elu selu celu softplus mish hardtanh hardsigmoid hardswish threshold
    erf erfc erfinv sin cos tan asin acos atan atan2 sinh cosh floor ceil round trunc frac fmod remainder
    clamp clamp_min clamp_max maximum minimum fmax fmin lerp addcmul addcdiv nan_to_num
    eq ne lt le gt ge logical_and logical_or logical_xor logical_not bitwise_and bitwise_or bitwise_xor bitwise_not
    isnan isinf isfinite isneginf isposinf
""".split())


def _counted_as_zero(func) -> bool:
    """An aten operator the convention counts as 0 FLOPs: named above (in-place and out variants
    too), or tagged pointwise by torch versions that tag operators."""
    tag = getattr(getattr(torch, "Tag", None), "pointwise", None)
    return _packet(func).rstrip("_") in ZERO_FLOP_OPS or _packet(func) in ZERO_FLOP_OPS or \
        (tag is not None and tag in getattr(func, "tags", ()))


def _op_name(func) -> str:
    return str(func)                           # "aten.mm.default"


def _packet(func) -> str:
    return func.overloadpacket.__name__         # "mm"


def _namespace(func) -> str:
    return getattr(func, "namespace", _op_name(func).split(".")[0])


def _rows(value) -> Optional[int]:
    """Rows of a tensor: numel over its last axis (a 0-dim tensor is one row); None for a non-tensor."""
    if isinstance(value, torch.Tensor):
        return int(value.numel() // value.shape[-1]) if value.dim() > 0 and value.shape[-1] > 0 else \
            (1 if value.dim() == 0 else 0)
    return None


def _first_tensor(values) -> Optional[torch.Tensor]:
    for v in values:
        if isinstance(v, torch.Tensor):
            return v
        if isinstance(v, (tuple, list)):
            t = _first_tensor(v)
            if t is not None:
                return t
    return None


class ModuleCounter:
    """Calls, rows and the running-module stack of every module of `models` (name prefix -> module),
    for one pass at a time. `controllers`: names of controller modules (their subtrees are the
    controller). `replayed(module)`: True when a controller module's own forward is replaced for
    replay, so its call is not an evaluation."""

    def __init__(self, models: Dict[str, torch.nn.Module], controllers: Sequence[str],
                 replayed: Callable[[torch.nn.Module], bool]):
        self.controllers = list(controllers)
        self._replayed = replayed
        self.stack: List[tuple] = []          # (name, rows or None) of each running call
        self.calls: Dict[str, int] = {}
        self.rows: Dict[str, int] = {}
        self.classes: Dict[str, str] = {}
        self.controller_evaluations = 0
        self._handles = []
        self._modules = []
        for prefix, model in models.items():
            for name, module in model.named_modules():
                full = ".".join(p for p in (prefix, name) if p)
                self._modules.append((full, module))

    def in_controller(self, name: str) -> bool:
        return any(name == c or name.startswith(c + ".") for c in self.controllers)

    def __enter__(self):
        for name, module in self._modules:
            self._handles.append(module.register_forward_pre_hook(self._pre(name)))
            self._handles.append(module.register_forward_hook(self._post(name)))
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []
        self.stack = []
        return False

    def _pre(self, name: str):
        def hook(module, args):
            # The stack entry keeps the rows the arguments gave, or None until the output gives them.
            self.stack.append((name, _rows(_first_tensor(args))))
            self.calls[name] = self.calls.get(name, 0) + 1
            self.classes[name] = type(module).__name__
            if self.in_controller(name) and not (name in self.controllers and self._replayed(module)):
                self.controller_evaluations += 1
            return None
        return hook

    def _post(self, name: str):
        def hook(module, args, output):
            if not self.stack or self.stack[-1][0] != name:
                raise RuntimeError(f"fca_adapter counting: module {name!r} returned while "
                                   f"{self.innermost()!r} was the innermost running module")
            _, rows = self.stack.pop()
            if rows is None:
                rows = _rows(_first_tensor([output])) or 0
            self.rows[name] = self.rows.get(name, 0) + rows
            return None
        return hook

    def innermost(self) -> str:
        return self.stack[-1][0] if self.stack else ""


class FlopCounter(TorchDispatchMode):
    """Every operator that runs under it: GEMM-class FLOPs by formula, attributed to the innermost
    running module of `modules` (controller or not); every other operator listed by name."""

    def __init__(self, modules: ModuleCounter):
        super().__init__()
        self.modules = modules
        self.gemm_ops: Dict[str, Dict[str, int]] = {}
        self.zero_ops: Dict[str, int] = {}
        self.uncounted_ops: Dict[str, int] = {}
        self.module_flops: Dict[str, int] = {}
        self.gemm_flops = 0
        self.controller_flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # A composite operator (matmul, einsum, linear, conv1d, scaled_dot_product_attention, ...)
        # runs as its decomposition, here under this mode, so that the products it is made of are
        # counted by their formulas (the same kernels run either way).
        if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        out = func(*args, **kwargs)
        name = _op_name(func)
        formula = GEMM_FORMULAS.get(_packet(func)) if _namespace(func) == "aten" else None
        if formula is not None:
            flops = int(formula(args, out))
            entry = self.gemm_ops.setdefault(name, {"calls": 0, "flops": 0})
            entry["calls"] += 1
            entry["flops"] += flops
            where = self.modules.innermost()
            self.module_flops[where] = self.module_flops.get(where, 0) + flops
            if self.modules.in_controller(where):
                self.controller_flops += flops
            else:
                self.gemm_flops += flops
        elif _namespace(func) == "aten" and _counted_as_zero(func):
            self.zero_ops[name] = self.zero_ops.get(name, 0) + 1
        else:
            self.uncounted_ops[name] = self.uncounted_ops.get(name, 0) + 1
        return out


def count_pass(run: Callable[[], torch.Tensor], models: Dict[str, torch.nn.Module], controllers: Sequence[str],
               replayed: Callable[[torch.nn.Module], bool], units: Dict[str, List[str]]):
    """Runs `run()` once under both counters; returns (its output, the counts document of
    exec_pass: docs/external-protocol.md). `units`: kind -> the module names of that kind."""
    modules = ModuleCounter(models, controllers, replayed)
    flops = FlopCounter(modules)
    with modules, flops:
        out = run()
    unit_counts = {}
    for kind, names in units.items():
        unit_counts[kind] = {"modules": len(names), "calls": sum(modules.calls.get(n, 0) for n in names),
                             "rows": sum(modules.rows.get(n, 0) for n in names)}
    counts = {
        "gemm_flops": flops.gemm_flops,
        "controller_flops": flops.controller_flops,
        "controller_evaluations": modules.controller_evaluations,
        "units": unit_counts,
        "modules": [{"name": n, "class": modules.classes[n], "calls": c, "rows": modules.rows.get(n, 0),
                     "flops": flops.module_flops.get(n, 0), "controller": modules.in_controller(n)}
                    for n, c in modules.calls.items()],
        "gemm_ops": flops.gemm_ops,
        "zero_ops": flops.zero_ops,
        "uncounted_ops": flops.uncounted_ops,
    }
    # Products issued outside every module (the adapter's own forward function) count too.
    if "" in flops.module_flops:
        counts["modules"].append({"name": "", "class": "(outside any module)", "calls": 0, "rows": 0,
                                  "flops": flops.module_flops[""], "controller": False})
    return out, counts
