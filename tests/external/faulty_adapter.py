"""The gated example adapter with one fault injected, for fca's tests of what a broken adapter gets.

    faulty_adapter.py --model m.safetensors --fault F

Faults: wrong_shape (run_live records one token too few), inexact (replay perturbs one logit by one
ulp), exit (the process exits with status 3 at the first replay), hang (the first replay never
answers), stdout (describe prints to the real stdout, corrupting the framing), raise (run_live
raises), controller (replay evaluates the controller), ignores (replay runs its own controller,
uncounted, and claims to have used the coefficients it was handed: the bug that once produced a clean
audit), ignores_reported (the same, but it reports the coefficients it really used), uncounted (live
passes never count the controller), overcounted (live passes count one evaluation more than the
layers), one_token (replay uses the coefficients it is handed at token 0 only and its own
controller's, uncounted, at every other token: exact, but blind to most of what it is handed).
"""

import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import fca_adapter  # noqa: E402
from gated_adapter import GatedAdapter  # noqa: E402

FAULTS = ("wrong_shape", "inexact", "exit", "hang", "stdout", "raise", "controller", "ignores", "ignores_reported",
          "uncounted", "overcounted", "one_token")


class FaultyAdapter(GatedAdapter):
    def __init__(self, path: str, fault: str):
        super().__init__(path)
        self.fault = fault

    def describe(self):
        if self.fault == "stdout":
            os.write(1, b"loading model...\n")   # what a careless print to the real stdout does
        return super().describe()

    def forward(self, ids, coefficients=None):
        replay = coefficients is not None
        if replay and self.fault == "exit":
            os._exit(3)
        if replay and self.fault == "hang":
            time.sleep(3600)
        if not replay and self.fault == "raise":
            raise RuntimeError("injected failure in forward")
        if (replay and self.fault in ("ignores", "ignores_reported")) or (not replay and self.fault == "uncounted"):
            B, T = ids.shape
            logits, own = self.model.forward(ids, None, lambda: None)     # its own controller, not counted
            own = own.reshape(B, self.model.L, T, 1, 1)
            return logits, (coefficients if self.fault == "ignores" else own)
        if replay and self.fault == "one_token":
            B, T = ids.shape
            _, own = self.model.forward(ids, None, lambda: None)            # its own controller, not counted
            mixed = own.reshape(B, self.model.L, T, 1, 1).clone()
            mixed[:, :, 0] = coefficients[:, :, 0]
            return super().forward(ids, mixed)[0], coefficients
        logits, used = super().forward(ids, coefficients)
        if replay and self.fault == "controller":
            self.count_controller()
        if not replay and self.fault == "overcounted":
            self.count_controller()                                         # one more than the layers
        if replay and self.fault == "inexact":
            logits = logits.clone()
            logits[0, 0, 0] = torch.nextafter(logits[0, 0, 0], torch.tensor(float("inf")))
        if not replay and self.fault == "wrong_shape":
            used = used[:, :, :-1]
        return logits, used


if __name__ == "__main__":
    fca_adapter.main(lambda args: FaultyAdapter(args.model, args.fault),
                     lambda p: p.add_argument("--fault", required=True, choices=FAULTS))
