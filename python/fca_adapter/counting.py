"""What a pass executed, counted from what ran (claim 3 for an adapter's model, docs/external-protocol.md).

Two counters, both attached for one counted pass and removed after it:

- `ModuleCounter`: a forward pre-hook and a forward hook on every module of the model keep the stack
  of modules that are running, and count each module's calls and the rows each call saw. Rows of a
  call: those of its first tensor argument whose sizes except the last (feature) axis are the
  output's, or else of its output (a block called as b(mask, x) counts x's rows). An expert handed
  a quarter of the tokens sees a quarter of the rows; a block that is not called sees none; a
  block whose result is multiplied by 0 saw every row.
- `FlopCounter`: a TorchDispatchMode that sees every aten operator that runs (a composite one such as
  linear, matmul or einsum as the operators it decomposes into) and gives the products a FLOP count
  by formula (multiply-add = 2; in-place variants and the fused nn.MultiheadAttention and
  nn.TransformerEncoderLayer paths too), attributed to the innermost running module. An operator
  without a formula is never counted as 0 silently: it is listed by name, either as one the
  convention counts as 0 (element-wise, reductions, normalisation, softmax, indexing, copies and
  views) or as uncounted.

Work that never reaches the dispatcher (numpy, a Triton kernel, a C extension called directly) or
that is a product written as element-wise operations cannot be sized by a formula; it is found from
its traces and listed in `unseen_work`: a parameter of 2 or more dimensions of a module that ran
which took part in no counted product (and was not read as a table: embeddings, positional tables
added to the input), and an expanding multiply (its result larger than each operand) that is then
summed. A pass with uncounted operators or unseen work is not fully counted, and fca claims no
saving from it.
"""

import math
import weakref
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


def _addbmm(args, out) -> int:        # input + sum over b of b1 [B, M, K] @ b2 [B, K, N]
    return _bmm(args[1:], out)


def _addr(args, out) -> int:          # input [M, N] + v1 [M] outer v2 [N]: one multiply-add per element
    return 2 * args[1].numel() * args[2].numel()


def _trilinear(args, out) -> int:
    # F.bilinear's kernel: i1, i2, i3 unsqueezed at expand1..3, multiplied in their broadcast shape
    # and summed over sumdim. One multiply-add per element of the broadcast shape ([N, O, I, J]
    # for bilinear: 2 N O I J).
    shapes = []
    for t, dims in zip(args[:3], args[3:6]):
        shape = list(t.shape)
        for d in sorted(dims):
            shape.insert(d, 1)
        shapes.append(shape)
    return 2 * math.prod(torch.broadcast_shapes(*shapes))


def _cdist(args, out) -> int:         # x1 [*, P, M], x2 [*, R, M] -> [*, P, R]: a difference and an accumulation per coordinate
    return 2 * out.numel() * args[0].shape[-1]


def _mha_flops(B: int, L: int, S: int, D: int) -> int:
    # q projection over L rows, k and v over S rows, QK^T and PV over all heads (H heads of D / H
    # features: D in all), the output projection over L rows.
    return 2 * B * D * D * (L + 2 * S) + 2 * 2 * B * L * S * D + 2 * B * L * D * D


def _native_mha(args, out) -> int:    # nn.MultiheadAttention's fused path: query [B, L, D], key/value [B, S, D], embed_dim
    q, k, D = args[0], args[1], int(args[3])
    return _mha_flops(math.prod(q.shape[:-2]), q.shape[-2], k.shape[-2], D)


def _encoder_layer(args, out) -> int:  # nn.TransformerEncoderLayer's fused path: src [B, L, D], ffn_weight_1 [F, D]
    src, D, ffn_1 = args[0], int(args[1]), args[14]
    B, L, F = math.prod(src.shape[:-2]), src.shape[-2], ffn_1.shape[0]
    return _mha_flops(B, L, L, D) + 2 * 2 * B * L * D * F


GEMM_FORMULAS: Dict[str, Callable] = {
    "mm": _mm, "addmm": _addmm, "_addmm_activation": _addmm, "bmm": _bmm, "baddbmm": _baddbmm,
    "mv": _mv, "addmv": _addmv, "dot": _dot, "vdot": _dot,
    "convolution": _convolution, "_convolution": _convolution,
    "_scaled_dot_product_flash_attention": _attention, "_scaled_dot_product_efficient_attention": _attention,
    "_scaled_dot_product_flash_attention_for_cpu": _attention, "_scaled_dot_product_cudnn_attention": _attention,
    "addbmm": _addbmm, "addr": _addr, "_trilinear": _trilinear, "_cdist_forward": _cdist,
    "_native_multi_head_attention": _native_mha, "_transformer_encoder_layer_fwd": _encoder_layer,
}


def _formula(func) -> Optional[Callable]:
    """The FLOP formula of an aten operator, its in-place variant's too (addmm_ is addmm's)."""
    if _namespace(func) != "aten":
        return None
    packet = _packet(func)
    formula = GEMM_FORMULAS.get(packet)
    if formula is None and packet.endswith("_"):
        formula = GEMM_FORMULAS.get(packet[:-1])
    return formula

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
    constant_pad_nd view_as_complex view_as_real _unique2 unique_consecutive searchsorted bucketize index_fill
    bincount unsafe_split unsafe_split_with_sizes unsafe_chunk polar complex real imag
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


# Operators that read a table rather than compute with it: a parameter only these (and views) touch
# is a lookup or positional table (an embedding), not work the counter missed.
READ_OPS: Set[str] = set("""
    embedding embedding_bag _embedding_bag index index_select gather take add sub rsub cat stack copy _to_copy
""".split())

# Reductions after which an expanding multiply is a product written as multiply-then-sum.
SUM_OPS: Set[str] = {"sum", "mean"}

OUTSIDE = "(outside every module)"   # the key of products issued while no module of the model runs


def _rows(value) -> Optional[int]:
    """Rows of a tensor: numel over its last axis (a 0-dim tensor is one row); None for a non-tensor."""
    if isinstance(value, torch.Tensor):
        return int(value.numel() // value.shape[-1]) if value.dim() > 0 and value.shape[-1] > 0 else \
            (1 if value.dim() == 0 else 0)
    return None


def _tensors(values) -> List[torch.Tensor]:
    """The tensors of a (nested) tuple or list, in order."""
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (tuple, list)):
            out.extend(_tensors(v))
    return out


def _call_rows(args, output) -> int:
    """Rows of one module call: those of the first tensor argument whose leading sizes (all but the
    feature axis) are the output's, so that a block called as b(mask [B, T], x [B, T, D]) counts
    x's rows; without one, the output's rows; without a tensor output, the first argument's."""
    outputs, inputs = _tensors([output]), _tensors(args)
    if outputs:
        lead = tuple(outputs[0].shape[:-1])
        for a in inputs:
            if a.dim() == outputs[0].dim() and tuple(a.shape[:-1]) == lead:
                return _rows(a)
        return _rows(outputs[0])
    return _rows(inputs[0]) if inputs else 0


def _storage_key(t: torch.Tensor) -> int:
    """The address of a tensor's storage: a parameter and every view of it (w.t(), w[:k]) share it."""
    storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return storage.data_ptr()


class ModuleCounter:
    """Calls, rows and the running-module stack of every module of `models` (name prefix -> module),
    for one pass at a time. `controllers`: names of controller modules (their subtrees are the
    controller). `replayed(module)`: True when a controller module's own forward is replaced for
    replay, so its call is not an evaluation."""

    def __init__(self, models: Dict[str, torch.nn.Module], controllers: Sequence[str],
                 replayed: Callable[[torch.nn.Module], bool]):
        self.controllers = list(controllers)
        self._replayed = replayed
        self.stack: List[str] = []            # names of the running calls, outermost first
        self.calls: Dict[str, int] = {}
        self.rows: Dict[str, int] = {}
        self.classes: Dict[str, str] = {}
        self.replayed_calls: Set[str] = set()
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
            self.stack.append(name)
            self.calls[name] = self.calls.get(name, 0) + 1
            self.classes[name] = type(module).__name__
            replayed = name in self.controllers and self._replayed(module)
            if replayed:
                self.replayed_calls.add(name)
            if self.in_controller(name) and not replayed:
                self.controller_evaluations += 1
            return None
        return hook

    def _post(self, name: str):
        def hook(module, args, output):
            if not self.stack or self.stack[-1] != name:
                raise RuntimeError(f"fca_adapter counting: module {name!r} returned while "
                                   f"{self.innermost()!r} was the innermost running module")
            self.stack.pop()
            self.rows[name] = self.rows.get(name, 0) + _call_rows(args, output)
            return None
        return hook

    def innermost(self) -> str:
        """The innermost running module's name ("" is the root model), or OUTSIDE."""
        return self.stack[-1] if self.stack else OUTSIDE

    def parameters_expected_to_work(self) -> List[tuple]:
        """(module name, parameter name, parameter) of every parameter of 2 or more dimensions owned
        by a module that ran in the pass, except a controller whose forward was replaced (replay)."""
        out = []
        for name, module in self._modules:
            if self.calls.get(name, 0) == 0 or name in self.replayed_calls:
                continue
            for pname, p in module.named_parameters(recurse=False):
                if p.dim() >= 2 and p.numel() > 0:
                    out.append((name, pname, p))
        return out


class FlopCounter(TorchDispatchMode):
    """Every operator that runs under it: GEMM-class FLOPs by formula, attributed to the innermost
    running module of `modules` (controller or not); every other operator listed by name. It also
    keeps what it needs to find work it could not see: the storages that took part in a counted
    product or were read as a table, and multiply-then-sum products (an expanding multiply whose
    result is summed)."""

    def __init__(self, modules: ModuleCounter):
        super().__init__()
        self.modules = modules
        self.gemm_ops: Dict[str, Dict[str, int]] = {}
        self.zero_ops: Dict[str, int] = {}
        self.uncounted_ops: Dict[str, int] = {}
        self.module_flops: Dict[str, int] = {}
        self.gemm_flops = 0
        self.controller_flops = 0
        self.in_product: Set[int] = set()     # storage keys of the operands of counted products
        self.read: Set[int] = set()           # storage keys read by a lookup or an addition
        self._expanded: Dict[int, tuple] = {}  # id(output) -> (weakref, module, description) of expanding multiplies
        self.multiply_then_sum: Dict[tuple, int] = {}   # (module, description) -> calls

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
        formula = _formula(func)
        operands = _tensors(list(args) + list(kwargs.values()))
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
            self.in_product.update(_storage_key(t) for t in operands)
        elif _namespace(func) == "aten" and _counted_as_zero(func):
            self.zero_ops[name] = self.zero_ops.get(name, 0) + 1
            self._watch_multiply_then_sum(func, operands, out)
        else:
            self.uncounted_ops[name] = self.uncounted_ops.get(name, 0) + 1
        if _namespace(func) == "aten" and _packet(func).rstrip("_") in READ_OPS:
            self.read.update(_storage_key(t) for t in operands)
        return out

    def _watch_multiply_then_sum(self, func, operands: List[torch.Tensor], out) -> None:
        """An element-wise multiply whose result is larger than each operand is an outer product
        (q[..., None, :] * k[..., None, :, :], x[:, None] * w); summed afterwards it is a matrix
        product the formulas never see. Remembered until summed (weakly: a freed result is forgotten)."""
        packet = _packet(func).rstrip("_")
        if packet == "mul" and isinstance(out, torch.Tensor) and len(operands) == 2 and \
                all(out.numel() > t.numel() for t in operands):
            shapes = " * ".join(str(list(t.shape)) for t in operands)
            self._expanded[id(out)] = (weakref.ref(out), self.modules.innermost(), f"{shapes} -> {list(out.shape)}, then summed")
        elif packet in SUM_OPS and operands:
            seen = self._expanded.get(id(operands[0]))
            if seen is not None and seen[0]() is operands[0]:
                key = seen[1:]
                self.multiply_then_sum[key] = self.multiply_then_sum.get(key, 0) + 1

    def unseen_work(self) -> List[Dict[str, object]]:
        """Work that ran but that no formula counted: parameters of modules that ran which took part
        in no counted product and were not read as a table (a product in numpy, a custom kernel,
        multiply-then-sum, a fused path without a formula), and multiply-then-sum products."""
        out = []
        for module, pname, p in self.modules.parameters_expected_to_work():
            key = _storage_key(p)
            if key not in self.in_product and key not in self.read:
                out.append({"kind": "parameter", "module": module,
                            "what": f"{pname} {list(p.shape)} took part in no counted product", "calls": self.modules.calls[module]})
        for (module, what), calls in self.multiply_then_sum.items():
            out.append({"kind": "multiply_then_sum", "module": module, "what": what, "calls": calls})
        return out


def _subtree_flops(name: str, module_flops: Dict[str, int]) -> int:
    return sum(f for n, f in module_flops.items() if n != OUTSIDE and (n == name or n.startswith(name + ".")))


def _unit_counts(units: Dict[str, List[str]], modules: ModuleCounter, flops: FlopCounter):
    """(kind -> {modules, calls, rows}, warnings): a unit that ran products on 0 rows, or rows with no
    counted product, is reported (rows taken from the wrong argument, or work the counter missed)."""
    counts, warnings = {}, []
    for kind, names in units.items():
        counts[kind] = {"modules": len(names), "calls": sum(modules.calls.get(n, 0) for n in names),
                        "rows": sum(modules.rows.get(n, 0) for n in names)}
        for n in names:
            rows, unit_flops = modules.rows.get(n, 0), _subtree_flops(n, flops.module_flops)
            if unit_flops > 0 and rows == 0:
                warnings.append(f"{kind} unit {n!r}: {unit_flops} FLOPs of products on 0 rows")
            elif rows > 0 and unit_flops == 0:
                warnings.append(f"{kind} unit {n!r}: {rows} rows and no counted product")
    return counts, warnings


def count_pass(run: Callable[[], torch.Tensor], models: Dict[str, torch.nn.Module], controllers: Sequence[str],
               replayed: Callable[[torch.nn.Module], bool], units: Dict[str, List[str]]):
    """Runs `run()` once under both counters; returns (its output, the counts document of
    exec_pass: docs/external-protocol.md). `units`: kind -> the module names of that kind."""
    modules = ModuleCounter(models, controllers, replayed)
    flops = FlopCounter(modules)
    with modules, flops:
        out = run()
    unit_counts, unit_warnings = _unit_counts(units, modules, flops)
    counts = {
        "gemm_flops": flops.gemm_flops,
        "controller_flops": flops.controller_flops,
        "controller_evaluations": modules.controller_evaluations,
        "units": unit_counts,
        "unit_warnings": unit_warnings,
        "modules": [{"name": n, "class": modules.classes[n], "calls": c, "rows": modules.rows.get(n, 0),
                     "flops": flops.module_flops.get(n, 0), "controller": modules.in_controller(n)}
                    for n, c in modules.calls.items()],
        "gemm_ops": flops.gemm_ops,
        "zero_ops": flops.zero_ops,
        "uncounted_ops": flops.uncounted_ops,
        "unseen_work": flops.unseen_work(),
    }
    # Products issued while no module of the model runs (the adapter's own forward function, after
    # the model returned) count too, under a name no module can have.
    if OUTSIDE in flops.module_flops:
        counts["modules"].append({"name": OUTSIDE, "class": "", "calls": 0, "rows": 0,
                                  "flops": flops.module_flops[OUTSIDE], "controller": False})
    return out, counts
