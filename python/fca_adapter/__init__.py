"""fca's PyTorch side: audit a model with `fca audit --external "<command>"`.

Two ways to give fca a model (docs/audit-your-model.md, docs/external-protocol.md):

- `HookedAdapter(model, forward, controllers)`: an unmodified `nn.Module`. Forward hooks on the
  controller modules (named by globs) record their outputs live and hand fca's coefficients back in
  replay; the modules cannot run during replay, and the hooks do the counting.
- a subclass of `Adapter` with `describe()` and `forward(ids, coefficients=None)`, for a model whose
  coefficients are not the output of a module.

Either is audited in this process with `audit(adapter, data=..., out=..., **flags)`, or served to
`fca audit --external "python3 my.py"` with `main(...)` or `serve(adapter)`. Python 3 with numpy and
torch only.
"""

from .protocol import (PROTOCOL, Adapter, AdapterError, Coefficients, Description, decode_safetensors,
                       encode_safetensors, logits_digest, main, read_message, read_safetensors_file, serve,
                       sha256_files, window_nll, write_message)
from .hooks import Controller, HookedAdapter, match_modules
from .api import AuditError, audit, exec, find_fca, local_rank, rank, ranks
from .execution import Reference

__all__ = ["PROTOCOL", "Adapter", "AdapterError", "AuditError", "audit", "exec", "Reference", "find_fca", "local_rank", "rank", "ranks", "Coefficients", "Controller", "Description", "HookedAdapter",
           "decode_safetensors", "encode_safetensors", "logits_digest", "main", "match_modules", "read_message",
           "read_safetensors_file", "serve", "sha256_files", "window_nll", "write_message"]
