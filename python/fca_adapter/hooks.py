"""HookedAdapter: audit an unmodified PyTorch model through hooks on its controller modules.

    adapter = fca_adapter.HookedAdapter(model, forward=lambda ids: model(ids).logits,
                                        controllers={"layers.*.gate": "B T K"}, identity=1.0)
    fca_adapter.serve(adapter)

`controllers` maps module-name globs (names as in `model.named_modules()`; `*` matches one dotted
component or part of one, `**` any number of components) to the axes of each matched module's
output:

- `B` the window axis and `T` the token axis, or `(B T)` one flattened token axis (B-major);
- `S` an optional stream axis;
- every other name is a source axis, and all of them flatten into fca's source axis K in order;
- a trailing `...` takes any remaining axes (into K), so one module called with outputs of
  different ranks fits one spec.

Examples: "S B T K" (MUDD's mixing weights), "(B T) K" (a router Linear over flattened tokens),
"B T ..." (a gate activation of any trailing shape). A module whose output is not one tensor is
given as `Controller(axes, to_tensor=..., from_tensor=...)`.

Each call of a matched module in one forward pass is one layer of the coefficient tensor
[B, L, T, S, K], in call order; modules of different sizes are laid out with the validity mask.

Live, the matched modules run as usual and their outputs are recorded exactly (bf16 and fp16 as
float32, which holds them exactly). In replay, each matched module returns the coefficients fca
hands it, in its output's layout, dtype and device, and its own computation never runs: this is
structural, not a promise. The module's forward is replaced for the pass (an instance-level
forward the module had is restored after it), any of its submodules that is called anyway fails the
request naming it, and its floating-point parameters and buffers are NaN for the pass, so a code
path that reads them anyway fails exact replay. The hooks count controller evaluations, in replay
too (a call of the module's own forward or of a module inside it); the user never does. (A bf16 or
fp16 controller receives fca's float32 coefficients rounded to its dtype; the recorded ones
round-trip exactly, so exact replay stays exact.) What a replay reports as the coefficients it used
is what each hooked call returned to the model, read by the same hook as live, so fca can compare
it with what it sent rounded to each layer's dtype (describe's coefficient_dtypes).
"""

import contextlib
import dataclasses
import hashlib
import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch

from .execution import Reference, glob_match, logits_of
from .protocol import Adapter, AdapterError, Description

_WINDOW, _TOKEN, _STREAM = "B", "T", "S"
# A controller output's dtype as describe names it (fca rounds what it sends to it, as the cast does).
_DTYPE_NAMES = {torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16", torch.float16: "F16"}


@dataclasses.dataclass
class _Axes:
    items: List[Tuple[str, ...]]   # one entry per output dimension: ("B",), ("B", "T"), ("K",) ...
    ellipsis: bool                 # a trailing "...": any further dimensions are source axes


def _parse_axes(spec: str, where: str) -> _Axes:
    text = spec.replace("(", " ( ").replace(")", " ) ").split()
    items: List[Tuple[str, ...]] = []
    ellipsis = False
    i = 0
    while i < len(text):
        word = text[i]
        if ellipsis:
            raise AdapterError(f"{where}: axes {spec!r}: '...' must be the last axis")
        if word == "...":
            ellipsis = True
        elif word == "(":
            close = text.index(")", i) if ")" in text[i:] else -1
            group = tuple(text[i + 1:close])
            if close < 0 or group != (_WINDOW, _TOKEN):
                raise AdapterError(f"{where}: axes {spec!r}: the only group is '(B T)', a flattened token axis")
            items.append(group)
            i = close
        elif word == ")":
            raise AdapterError(f"{where}: axes {spec!r}: unbalanced ')'")
        else:
            items.append((word,))
        i += 1
    names = [n for item in items for n in item]
    for axis in (_WINDOW, _TOKEN):
        if names.count(axis) != 1:
            raise AdapterError(f"{where}: axes {spec!r} must name the window axis B and the token axis T once each")
    if names.count(_STREAM) > 1:
        raise AdapterError(f"{where}: axes {spec!r} name the stream axis S twice")
    if len(set(names)) != len(names):
        raise AdapterError(f"{where}: axes {spec!r} name an axis twice")
    return _Axes(items, ellipsis)


class Controller:
    """A controller module's output spec: its axes (see the module docstring) and, for an output
    that is not one tensor (a tuple of weights and indices, say), converters: `to_tensor(output)`
    gives the tensor laid out as `axes`, `from_tensor(tensor)` builds the output to return in
    replay from such a tensor."""

    def __init__(self, axes: str, to_tensor: Optional[Callable] = None, from_tensor: Optional[Callable] = None):
        self.axes = axes
        self.to_tensor = to_tensor
        self.from_tensor = from_tensor


def match_modules(model: torch.nn.Module, controllers: Dict[str, Union[str, Controller]]
                  ) -> List[Tuple[str, torch.nn.Module, Controller]]:
    """The matched (name, module, Controller), in `named_modules()` order. A glob that matches no
    module, a module matched by two globs, and a module inside another matched one are errors."""
    if not controllers:
        raise AdapterError("controllers: give at least one module-name glob and the axes of its output")
    names = [(n, m) for n, m in model.named_modules() if n]
    matched: Dict[str, Tuple[torch.nn.Module, Controller, str]] = {}
    for glob, spec in controllers.items():
        controller = spec if isinstance(spec, Controller) else Controller(spec)
        _parse_axes(controller.axes, f"controllers[{glob!r}]")
        hits = [(n, m) for n, m in names if glob_match(glob.split("."), n.split("."))]
        if not hits:
            examples = ", ".join(n for n, _ in names[:8])
            raise AdapterError(f"controllers: the glob {glob!r} matches no module of {type(model).__name__} "
                               f"(module names look like: {examples}; python3 -m fca_adapter modules lists them all)")
        for n, m in hits:
            if n in matched:
                raise AdapterError(f"controllers: module {n!r} is matched by both {matched[n][2]!r} and {glob!r}")
            matched[n] = (m, controller, glob)
    for a in matched:
        for b in matched:
            if b.startswith(a + "."):
                raise AdapterError(f"controllers: module {b!r} ({matched[b][2]!r}) lies inside module {a!r} "
                                   f"({matched[a][2]!r}); hook the one whose output is the coefficients")
    return [(n, matched[n][0], matched[n][1]) for n, _ in names if n in matched]


@dataclasses.dataclass
class _Call:
    """One layer: a call of a matched module, with its output's layout."""
    name: str
    dims: List[Tuple[str, int]]    # the output's dimensions after expanding (B T): (axis, size; 0 for B and T)
    streams: int
    sources: int

    def output_shape(self, B: int, T: int, axes: _Axes) -> List[int]:
        sizes = {_WINDOW: B, _TOKEN: T}
        shape, d = [], 0
        for item in axes.items:
            if len(item) == 2:
                shape.append(B * T)
                d += 2
            else:
                shape.append(sizes.get(item[0], self.dims[d][1]))
                d += 1
        return shape + [size for _, size in self.dims[d:]]


def _layout(x: torch.Tensor, axes: _Axes, B: int, T: int, where: str) -> Tuple[List[Tuple[str, int]], torch.Tensor]:
    """The output's expanded dimensions and the tensor as [B, T, S, K] float32."""
    if x.dim() < len(axes.items) or (x.dim() > len(axes.items) and not axes.ellipsis):
        raise AdapterError(f"{where}: output of shape {list(x.shape)} does not fit the axes of {len(axes.items)} "
                           f"dimensions{' or more' if axes.ellipsis else ''}")
    dims: List[Tuple[str, int]] = []
    for i, item in enumerate(axes.items):
        size = x.shape[i]
        if len(item) == 2:
            if size != B * T:
                raise AdapterError(f"{where}: axis {i} (B T) has {size} entries, expected {B} x {T} = {B * T}")
            dims += [(_WINDOW, B), (_TOKEN, T)]
        else:
            dims.append((item[0], size))
    dims += [(f"...{j}", x.shape[j]) for j in range(len(axes.items), x.dim())]
    names = [n for n, _ in dims]
    for axis, expected in ((_WINDOW, B), (_TOKEN, T)):
        size = dims[names.index(axis)][1]
        if size != expected:
            raise AdapterError(f"{where}: output of shape {list(x.shape)}: axis {axis} has {size} entries, expected {expected}")
    order = [names.index(_WINDOW), names.index(_TOKEN)] + ([names.index(_STREAM)] if _STREAM in names else []) + \
        [i for i, n in enumerate(names) if n not in (_WINDOW, _TOKEN, _STREAM)]
    y = x.detach().reshape([s for _, s in dims]).permute(order)
    S = dims[names.index(_STREAM)][1] if _STREAM in names else 1
    K = math.prod(s for n, s in dims if n not in (_WINDOW, _TOKEN, _STREAM))
    layout = [(n, 0 if n in (_WINDOW, _TOKEN) else s) for n, s in dims]
    return layout, y.reshape(B, T, S, K).to(torch.float32)


def _from_layout(c: torch.Tensor, call: _Call, axes: _Axes, B: int, T: int) -> torch.Tensor:
    """c [B, T, S_l, K_l] back into the module's output layout (the inverse of _layout)."""
    names = [n for n, _ in call.dims]
    sizes = [B if n == _WINDOW else T if n == _TOKEN else s for n, s in call.dims]
    order = [names.index(_WINDOW), names.index(_TOKEN)] + ([names.index(_STREAM)] if _STREAM in names else []) + \
        [i for i, n in enumerate(names) if n not in (_WINDOW, _TOKEN, _STREAM)]
    inverse = [order.index(i) for i in range(len(order))]
    y = c.reshape([sizes[i] for i in order]).permute(inverse)
    return y.reshape(call.output_shape(B, T, axes))


def _state_sha256(model: torch.nn.Module) -> str:
    """SHA-256 of the model's state: every parameter and buffer (persistent or not; a tied parameter
    once, under its first name), by name order: its name, dtype, shape and bytes. Any dtype and
    layout of a dense tensor: 0-dim, non-contiguous, bf16/fp16, bool, integer. Meta tensors (no
    values) and sparse tensors are refused: give model_sha256= for such a model."""
    h = hashlib.sha256()
    tensors = dict(model.named_parameters())            # deduplicated: a tied parameter once
    for name, b in model.named_buffers():
        if not any(b is t for t in tensors.values()):
            tensors[name] = b
    for name in sorted(tensors):
        t = tensors[name]
        if t.is_meta:
            raise AdapterError(f"HookedAdapter: tensor {name!r} is on the meta device (it has no values to hash): "
                               f"load the weights first, or give model_sha256=")
        if t.layout != torch.strided:
            raise AdapterError(f"HookedAdapter: tensor {name!r} is {t.layout} (sparse): its bytes are not hashed here; "
                               f"give model_sha256= (e.g. sha256_files of the checkpoint)")
        flat = t.detach().cpu().contiguous().reshape(-1)
        h.update(f"{name}:{t.dtype}:{list(t.shape)}\n".encode())
        h.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return h.hexdigest()


def _max_tokens_of(model: torch.nn.Module) -> Optional[int]:
    config = getattr(model, "config", None)
    for source in (config, model):
        for attr in ("max_position_embeddings", "n_positions", "block_size", "seq_len", "max_seq_len", "n_ctx"):
            value = getattr(source, attr, None) if source is not None else None
            if isinstance(value, int) and value > 0:
                return value
    return None


class HookedAdapter(Adapter):
    """An unmodified nn.Module audited through hooks on its controller modules (module docstring).

    model: the module (on CPU or CUDA; its device is used as it is).
    forward: ids int64 [B, T] on the model's device -> logits [B, T, V] (or an output with .logits,
        or a tuple whose first element is the logits); default model(ids).
    controllers: {glob: axes or Controller}.
    vocab, max_tokens: taken from the model (its logits; config.max_position_embeddings, n_positions,
        block_size, ...) where not given.
    tokenizer: None (the corpus bytes are the ids; needs vocab >= 256) or a callable bytes -> ids.
    identity: the coefficients that make the controllers no-ops, for fca's identity condition: a
        number for every valid coordinate, or a tensor [L, S, K]; None skips that condition (fca
        says why).
    model_sha256: the weights' content hash for the cache manifest (e.g. sha256_files of the
        checkpoint's files); default: SHA-256 of the module's state_dict (names, dtypes, shapes, bytes).
    executed: for fca exec, unit kind -> module-name globs whose rows are counted as executed work,
        e.g. {"blocks": "blocks.*", "experts": "**.experts.*"} ("blocks" gives exec's executed blocks).
    reference: for fca exec, what the latency is compared with (execution.Reference: a Dense model,
        or a callable running this model with its controller replaced by constants).
    name: what audit.json, exec.json and the console call the model ("external: <name>"); default
        the model's class name.
    """

    def __init__(self, model: torch.nn.Module, forward: Optional[Callable] = None,
                 controllers: Optional[Dict[str, Union[str, Controller]]] = None, vocab: Optional[int] = None,
                 max_tokens: Optional[int] = None, tokenizer: Optional[Callable[[bytes], Sequence[int]]] = None,
                 identity: Union[None, float, torch.Tensor] = None, family: Optional[str] = None,
                 description: Optional[str] = None, static_profile: str = "LayerMean",
                 structure_removed: str = "GlobalMean", model_sha256: Optional[str] = None,
                 executed: Optional[Dict[str, Union[str, Sequence[str]]]] = None, reference: Optional[Reference] = None,
                 name: Optional[str] = None):
        super().__init__()
        self.executed, self.reference = dict(executed or {}), reference
        self.model = model
        self._forward = forward or (lambda ids: model(ids))
        self._matched = match_modules(model, controllers or {})
        self._globs = list((controllers or {}).keys())
        self._axes = {name: _parse_axes(c.axes, name) for name, _, c in self._matched}
        self._controller = {name: c for name, _, c in self._matched}
        self._vocab, self._max_tokens, self._tokenizer, self._identity = vocab, max_tokens, tokenizer, identity
        self._family, self._description, self._model_sha256 = family, description, model_sha256
        self._name = name or type(model).__name__
        self._static_profile, self._structure_removed = static_profile, structure_removed
        self._mode = "off"                   # "live" (record), "replay" (hand back) or "off"
        self._recorded: List[Tuple[str, torch.Tensor]] = []
        self._layout: Optional[List[_Call]] = None
        self._handed: Optional[torch.Tensor] = None
        self._consumed: List[bool] = []
        self._B = self._T = 0
        self.device = next(iter(model.parameters()), torch.empty(0)).device
        self._handles: List = []
        self._attach_hooks()
        self.exec_units(model)                   # an `executed` glob that matches nothing fails here
        self._description_cache: Optional[Description] = None

    def _attach_hooks(self) -> None:
        for name, module, _ in self._matched:
            self._handles.append(module.register_forward_hook(self._make_record_hook(name)))
            for sub_name, sub in module.named_modules():
                if sub is not module:
                    self._handles.append(sub.register_forward_pre_hook(self._make_refusal_hook(f"{name}.{sub_name}", name)))

    # -- hooks -------------------------------------------------------------------------------
    def _make_record_hook(self, name: str):
        def hook(module, inputs, output):
            if self._mode not in ("live", "replay"):
                return None
            if self._mode == "live":
                self.count_controller()
            # Live: the controller's output. Replay: what the module returned to the model (fca's
            # coefficients after the cast to the module's dtype and from_tensor), hashed for fca.
            c = self._controller[name]
            tensor = c.to_tensor(output) if c.to_tensor else output
            if not isinstance(tensor, torch.Tensor):
                raise AdapterError(f"{name}: its output is a {type(output).__name__}, not a tensor: give "
                                   f"Controller(axes, to_tensor=..., from_tensor=...)")
            self._recorded.append((name, tensor))
            return None
        return hook

    def _make_refusal_hook(self, name: str, owner: str):
        def hook(module, inputs):
            if self._mode == "replay":
                self.count_controller()      # counted, then refused: the answer never reaches fca
                raise AdapterError(f"replay: module {name!r}, inside the controller {owner!r}, was called: a "
                                   f"controller's modules must not run in replay (does the model call it directly?)")
            return None
        return hook

    @contextlib.contextmanager
    def _forwards_replaced(self, replacement: Callable[[str], Callable]):
        """Every matched module's forward is replacement(name) inside the block; after it, the
        module's own forward again (an instance-level forward it had is restored, not deleted).
        Inside the block the controllers' classes count: their class-level forward, which a hooked
        call no longer reaches, counts an evaluation when it runs for a matched module by any other
        route (type(m).forward(m, x), a parent class's method calling it), so that fca's check of 0
        evaluations in replay can fail."""
        own = [module.__dict__.get("forward") for _, module, _ in self._matched]
        try:
            for name, module, _ in self._matched:
                module.forward = replacement(name)
            with self._class_forwards_counted():
                yield
        finally:
            for (_, module, _), forward in zip(self._matched, own):
                if forward is None:
                    module.__dict__.pop("forward", None)
                else:
                    module.forward = forward

    @contextlib.contextmanager
    def _class_forwards_counted(self):
        watched = {id(module) for _, module, _ in self._matched}
        classes = list(dict.fromkeys(type(module) for _, module, _ in self._matched))
        own = [cls.__dict__.get("forward") for cls in classes]

        def counting(original):
            def forward(module, *args, **kwargs):
                if id(module) in watched:
                    self.count_controller()      # the controller's own code runs during a replay
                return original(module, *args, **kwargs)
            return forward
        try:
            for cls in classes:
                cls.forward = counting(cls.forward)
            yield
        finally:
            for cls, forward in zip(classes, own):
                if forward is None:
                    del cls.forward             # it was inherited: inherit it again
                else:
                    cls.forward = forward

    def _replacement(self, name: str):
        def forward(*args, **kwargs):
            layer = len([c for c in self._consumed if c])
            if self._layout is None or layer >= len(self._layout) or self._layout[layer].name != name:
                expected = self._layout[layer].name if self._layout is not None and layer < len(self._layout) else "none"
                raise AdapterError(f"replay: controller call {layer} is {name!r}, but the live passes called {expected!r} there")
            call = self._layout[layer]
            self._consumed[layer] = True
            c = self._handed[:, layer, :, :call.streams, :call.sources]
            out = _from_layout(c, call, self._axes[name], self._B, self._T).to(device=self.device, dtype=self._dtype[layer])
            controller = self._controller[name]
            return controller.from_tensor(out) if controller.from_tensor else out
        forward.fca_replayed = True
        return forward

    # -- one pass ------------------------------------------------------------------------------
    def _run(self, ids: torch.Tensor):
        return logits_of(self._forward(ids.to(self.device)))

    def _live(self, ids: torch.Tensor):
        B, T = ids.shape
        self._mode, self._recorded = "live", []
        try:
            logits = self._run(ids)
        finally:
            self._mode = "off"
        return logits, self._calls_recorded(B, T)

    def _calls_recorded(self, B: int, T: int):
        """(call, its output as [B, T, S, K] float32, its dtype) of each hooked call of the pass."""
        calls = []
        for name, tensor in self._recorded:
            dims, canonical = _layout(tensor, self._axes[name], B, T, name)
            calls.append((_Call(name, dims, canonical.shape[2], canonical.shape[3]), canonical, tensor.dtype))
        return calls

    def _record_of(self, calls, B: int, T: int) -> torch.Tensor:
        """The record [B, L, T, S, K] float32 of a pass's calls (0 outside each layer's own S, K)."""
        d = self._description_cache
        values = torch.zeros(B, d.layers, T, d.streams, d.sources, dtype=torch.float32)
        for l, (call, canonical, _) in enumerate(calls):
            values[:, l, :, :call.streams, :call.sources] = canonical.cpu()
        return values

    def _check_layout(self, calls, where: str) -> None:
        seen = [(c.name, c.dims) for c, _, _ in calls]
        known = [(c.name, c.dims) for c in self._layout]
        if seen != known:
            raise AdapterError(f"{where}: the controller calls ({len(seen)}: {[n for n, _ in seen][:6]}...) differ from "
                               f"the first pass's ({len(known)}: {[n for n, _ in known][:6]}...); every forward pass must "
                               f"call the same controllers in the same order with outputs of the same shape")

    def describe(self) -> Description:
        if self._description_cache is not None:
            return self._description_cache
        max_tokens = self._max_tokens or _max_tokens_of(self.model)
        if not max_tokens:
            raise AdapterError("HookedAdapter: give max_tokens (the model's config names no maximum length)")
        probe_vocab = min(self._vocab or 256, 256)
        ids = (torch.arange(max_tokens, dtype=torch.int64) * 7 % probe_vocab).reshape(1, max_tokens)
        counted = self._controller_evaluations   # the layout probe belongs to no request
        with torch.inference_mode():
            logits, calls = self._live(ids)
        self._controller_evaluations = counted
        if not calls:
            raise AdapterError("HookedAdapter: no matched controller module ran in a forward pass")
        self._layout = [c for c, _, _ in calls]
        self._dtype = [d for _, _, d in calls]
        unsupported = [(c.name, d) for c, _, d in calls if d not in _DTYPE_NAMES]
        if unsupported:
            raise AdapterError(f"HookedAdapter: controller {unsupported[0][0]!r} outputs {unsupported[0][1]}; fca replays "
                               f"coefficients into float32, float64, bfloat16 or float16 outputs")
        vocab = self._vocab or int(logits.shape[-1])
        L = len(self._layout)
        S = max(c.streams for c in self._layout)
        K = max(c.sources for c in self._layout)
        mask = torch.zeros(L, S, K, dtype=torch.bool)
        for l, c in enumerate(self._layout):
            mask[l, :c.streams, :c.sources] = True
        identity = None
        if self._identity is not None:
            identity = torch.as_tensor(self._identity, dtype=torch.float32)
            identity = identity.expand(L, S, K).clone() if identity.dim() == 0 else identity
            identity = torch.where(mask, identity, torch.zeros_like(identity))
        globs = ", ".join(self._globs)
        self._description_cache = Description(
            family=self._family or f"hooked:{type(self.model).__name__}", name=self._name,
            description=self._description or f"{type(self.model).__name__}, {L} controller outputs of {globs}",
            model_sha256=self._model_sha256 or _state_sha256(self.model), vocab=vocab, max_tokens=max_tokens, layers=L, streams=S, sources=K,
            mask=mask, identity=identity, static_profile=self._static_profile, structure_removed=self._structure_removed,
            tokenizer="bytes" if self._tokenizer is None else "ids",
            config={"class": type(self.model).__name__, "controllers": {n: self._controller[n].axes for n, _, _ in self._matched},
                    "layers": [c.name for c in self._layout]},
            parameter_count=sum(p.numel() for p in self.model.parameters()),
            coefficient_dtypes=[_DTYPE_NAMES[d] for d in self._dtype])
        return self._description_cache

    def tokenize(self, text: bytes) -> Sequence[int]:
        if self._tokenizer is None:
            raise AdapterError("HookedAdapter: no tokenizer was given (the corpus bytes are the ids)")
        return self._tokenizer(text)

    def forward(self, ids: torch.Tensor, coefficients: Optional[torch.Tensor] = None):
        d = self.describe()
        B, T = ids.shape
        if coefficients is None:
            logits, calls = self._live(ids)
            self._check_layout(calls, "live")
            return logits.to(torch.float32).cpu(), self._record_of(calls, B, T)
        return self._replay(ids, coefficients)

    def _replay(self, ids: torch.Tensor, coefficients: torch.Tensor):
        B, T = ids.shape
        self._B, self._T, self._handed = B, T, coefficients
        self._consumed = [False] * len(self._layout)
        self._recorded = []
        saved = []
        try:
            for name, module, _ in self._matched:
                # The controller's floating-point state is NaN for the pass (parameters and buffers),
                # so that a code path reading it anyway fails exact replay. Integer and bool buffers
                # have no NaN and stay.
                for t in list(module.parameters()) + [b for b in module.buffers() if b.is_floating_point()]:
                    saved.append((t, t.data))
                    t.data = torch.full_like(t.data, float("nan"))
            self._mode = "replay"
            with self._forwards_replaced(self._replacement):
                logits = self._run(ids)
        finally:
            self._mode = "off"
            for t, data in saved:
                t.data = data
        missing = [self._layout[l].name for l, used in enumerate(self._consumed) if not used]
        if missing:
            raise AdapterError(f"replay: {len(missing)} controller calls of the live passes did not happen "
                               f"({missing[:4]}): the replay must use every coefficient it is handed")
        # The record of what the modules returned to the model, as the hooks saw it: fca hashes what
        # it sent rounded to each layer's dtype and compares. A call that returned without the hook
        # seeing it (the model called module.forward directly) leaves its layer NaN, which never matches.
        calls = self._calls_recorded(B, T)
        if [c.name for c, _, _ in calls] != [c.name for c in self._layout[:len(calls)]]:
            raise AdapterError(f"replay: the hooked calls {[c.name for c, _, _ in calls][:6]} are not those of the live "
                               f"passes {[c.name for c in self._layout][:6]}")
        used = self._record_of(calls, B, T)
        used[:, len(calls):] = float("nan")
        return logits.to(torch.float32).cpu(), used

    def run_unrecorded(self, ids: torch.Tensor) -> torch.Tensor:
        with self.exec_hooks_detached():
            return self._run(ids).to(torch.float32).cpu()

    # -- claim 3, fca exec (execution.py) -----------------------------------------------------
    def exec_device(self) -> torch.device:
        return self.device

    def exec_controllers(self) -> List[str]:
        return [name for name, _, _ in self._matched]

    def exec_counts_controllers(self) -> bool:
        return True

    def exec_replayed(self, module: torch.nn.Module) -> bool:
        return getattr(module.__dict__.get("forward"), "fca_replayed", False)

    def exec_handed(self, record) -> List:
        """Each controller call's output, in its own layout, dtype and device, from a record
        [B, L, T, S, K]: built once, before the pass that returns them."""
        values = self.record_values(record)
        B, _, T = values.shape[:3]
        outputs = []
        for l, call in enumerate(self._layout):
            c = values[:, l, :, :call.streams, :call.sources]
            out = _from_layout(c, call, self._axes[call.name], B, T).to(device=self.device, dtype=self._dtype[l])
            controller = self._controller[call.name]
            outputs.append(controller.from_tensor(out) if controller.from_tensor else out)
        return outputs

    def exec_forward(self, ids: torch.Tensor, handed) -> torch.Tensor:
        """One pass: live (handed None: the controllers run, nothing is recorded) or with each
        controller call returning its prepared output (the controllers' own forwards never run)."""
        if handed is None:
            return self._run(ids)
        position = [0]

        def replacement(name):
            def forward(*args, **kwargs):
                layer = position[0]
                if layer >= len(self._layout) or self._layout[layer].name != name:
                    raise AdapterError(f"exec replay: controller call {layer} is {name!r}, but the live passes called "
                                       f"{self._layout[layer].name if layer < len(self._layout) else 'none'!r} there")
                position[0] += 1
                return handed[layer]
            forward.fca_replayed = True
            return forward
        with self._forwards_replaced(replacement):
            logits = self._run(ids)
        if position[0] != len(self._layout):
            raise AdapterError(f"exec replay: {position[0]} of the {len(self._layout)} controller calls of the live "
                               f"passes happened")
        return logits

    def exec_timed_pass(self) -> str:
        return "the model's forward with no hook of fca_adapter (controllers replaced by their handed outputs in replay)"

    @contextlib.contextmanager
    def exec_hooks_detached(self):
        """No hook of this adapter on any module (the exec counters attach their own)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        try:
            yield
        finally:
            self._attach_hooks()
