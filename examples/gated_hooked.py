"""The gated example model audited through hooks alone: the model is unmodified, its controller is
the module `controller` (one call per layer, output g [B, T]) and its blocks are `blocks.*`. Compare
examples/gated_adapter.py, the same model behind a hand-written Adapter.

    fca audit --external "python3 examples/gated_hooked.py --model runs/featuregate.safetensors" --out audits/fg-hooked
    fca exec --external "python3 examples/gated_hooked.py --model runs/featuregate.safetensors --reference runs/dense.safetensors" --out exec/fg-hooked

--reference names what fca exec compares the latency with: a Dense checkpoint of the same shape, or
`ones` (this model with its controller replaced by the constant g = 1).
"""
import argparse, os, sys
import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fca_adapter  # noqa: E402
from gated_adapter import GatedTransformer  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--model", required=True)
parser.add_argument("--reference", help="fca exec's reference: a Dense checkpoint, or 'ones' (g = 1 for every block)")
parser.add_argument("--threads", type=int, default=2)
args = parser.parse_args()
model = GatedTransformer(args.model)
reference = None
if args.reference == "ones":
    reference = fca_adapter.Reference("gates = 1", forward=lambda ids: model(ids, torch.ones(ids.shape[0], model.L, ids.shape[1]))[0])
elif args.reference:
    dense = GatedTransformer(args.reference)
    reference = fca_adapter.Reference({"dense": "Dense"}.get(dense.gate, dense.gate),
                                      forward=lambda ids: dense(ids, None)[0], model=dense)
adapter = fca_adapter.HookedAdapter(model, forward=lambda ids: model(ids, None)[0], controllers={"controller": "B T"},
                                    identity=1.0, description=f"{model.gate} L {model.L}, D {model.D} (hooked PyTorch)",
                                    model_sha256=fca_adapter.sha256_files([args.model]),
                                    executed={"blocks": "blocks.*"}, reference=reference)
torch.set_num_threads(args.threads)
torch.use_deterministic_algorithms(True)
sys.exit(fca_adapter.serve(adapter))
