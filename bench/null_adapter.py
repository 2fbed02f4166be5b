"""An adapter that computes nothing, for measuring the external protocol's own cost per message.

    fca audit --external "python3 bench/null_adapter.py --model m.safetensors" ...

It describes the gated checkpoint it is given (so fca sends the same shapes as for the real
model) but its forward returns constant logits and the coefficients it was handed (ones when live).
The audit's wall time divided by the number of messages is then what the protocol costs: fca's
encoding, the pipe in both directions, the adapter's decoding, its float64 NLL and its SHA-256 of
the logits. Its figures are meaningless; only its timing is.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fca_adapter  # noqa: E402
from gated_adapter import GatedAdapter  # noqa: E402


class NullAdapter(GatedAdapter):
    def forward(self, ids, coefficients=None):
        B, T = ids.shape
        logits = torch.zeros(B, T, 256)
        used = torch.ones(B, self.model.L, T, 1, 1) if coefficients is None else coefficients
        return logits, used


if __name__ == "__main__":
    fca_adapter.main(lambda args: NullAdapter(args.model))
