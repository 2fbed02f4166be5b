"""The gated example model audited through hooks alone: the model is unmodified, its controller is
the module `controller` (one call per layer, output g [B, T]). Compare examples/gated_adapter.py,
the same model behind a hand-written Adapter.

    fca audit --external "python3 examples/gated_hooked.py --model runs/featuregate.safetensors" --out audits/fg-hooked
"""
import argparse, os, sys
import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fca_adapter  # noqa: E402
from gated_adapter import GatedTransformer  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--model", required=True)
parser.add_argument("--threads", type=int, default=2)
args = parser.parse_args()
model = GatedTransformer(args.model)
adapter = fca_adapter.HookedAdapter(model, forward=lambda ids: model(ids, None)[0], controllers={"controller": "B T"},
                                    identity=1.0, description=f"{model.gate} L {model.L}, D {model.D} (hooked PyTorch)",
                                    model_sha256=fca_adapter.sha256_files([args.model]))
torch.set_num_threads(args.threads)
torch.use_deterministic_algorithms(True)
sys.exit(fca_adapter.serve(adapter))
