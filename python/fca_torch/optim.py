"""fca train's optimizer, written out rather than taken from torch.optim so that both engines do
the same arithmetic in the same order (src/train/adamw.cpp, element by element in float32):

    m = b1 m + (1 - b1) g;  v = b2 v + ((1 - b2) g) g
    p = p decay - (step_size m) / (sqrt(v) inv_sqrt_bias2 + eps)

with decay = 1 - lr wd on the rank-2 tensors (1 elsewhere), step_size = lr / (1 - b1^t) and
inv_sqrt_bias2 = 1 / sqrt(1 - b2^t), the constants computed in double and rounded to float32 as
fca does. The moments are named by parameter, so they are written to and read from fca's training
state (adam.m.<name>, adam.v.<name>) and a run resumes in either engine.
"""

import math
from typing import Dict

import torch


def learning_rate(step: int, total: int, warmup: int, peak: float, min_ratio: float) -> float:
    """Linear warm-up over `warmup` steps, then cosine decay to min_ratio * peak at `total`."""
    if warmup > 0 and step < warmup:
        return peak * (step + 1) / warmup
    span = total - warmup
    progress = min(1.0, (step - warmup) / span) if span > 0 else 1.0
    return peak * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(3.141592653589793 * progress)))


def f32(x: float) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float32)


class AdamW:
    def __init__(self, params: Dict[str, torch.nn.Parameter], beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1):
        self.params = params
        self.beta1, self.beta2, self.eps, self.weight_decay = beta1, beta2, eps, weight_decay
        self.m = {n: torch.zeros_like(p, dtype=torch.float32) for n, p in params.items()}
        self.v = {n: torch.zeros_like(p, dtype=torch.float32) for n, p in params.items()}
        self.steps_taken = 0

    @torch.no_grad()
    def step(self, lr: float) -> None:
        """One update of every parameter, as lists (torch._foreach_*: a few kernel launches per
        step on a GPU, not a few per tensor), each operation the element-wise one above."""
        self.steps_taken += 1
        t = self.steps_taken
        bias1, bias2 = 1.0 - self.beta1 ** t, 1.0 - self.beta2 ** t
        b1, b2 = float(f32(self.beta1)), float(f32(self.beta2))
        one_minus_b1, one_minus_b2 = float(f32(1.0) - f32(b1)), float(f32(1.0) - f32(b2))
        step_size, inv_sqrt_bias2 = float(f32(lr / bias1)), float(f32(1.0 / math.sqrt(bias2)))
        eps, decay = float(f32(self.eps)), float(f32(1.0 - lr * self.weight_decay))
        names = list(self.params)
        ps = [self.params[n] for n in names]
        gs = [p.grad for p in ps]
        ms, vs = [self.m[n] for n in names], [self.v[n] for n in names]
        torch._foreach_mul_(ms, b1)
        torch._foreach_add_(ms, torch._foreach_mul(gs, one_minus_b1))
        torch._foreach_mul_(vs, b2)
        scaled = torch._foreach_mul(gs, one_minus_b2)
        torch._foreach_mul_(scaled, gs)
        torch._foreach_add_(vs, scaled)
        denominator = torch._foreach_sqrt(vs)
        torch._foreach_mul_(denominator, inv_sqrt_bias2)
        torch._foreach_add_(denominator, eps)
        decayed = [p for p in ps if p.dim() == 2]
        if decayed:
            torch._foreach_mul_(decayed, decay)
        update = torch._foreach_mul(ms, step_size)
        torch._foreach_div_(update, denominator)
        torch._foreach_sub_(ps, update)


@torch.no_grad()
def clip_gradients(params, clip: float) -> float:
    """The global L2 norm of the gradients (each tensor's sum of squares in double, as fca), scaled
    to `clip` when above it. One host synchronisation per step, not one per tensor."""
    grads = [p.grad for p in params]
    norm = math.sqrt(float(torch.stack([g.double().pow(2).sum() for g in grads]).sum()))
    if not math.isfinite(norm):
        raise FloatingPointError(f"training diverged (gradient norm {norm}): lower --lr")
    if clip > 0 and norm > clip:
        torch._foreach_mul_(grads, float(f32(clip / norm)))
    return norm
