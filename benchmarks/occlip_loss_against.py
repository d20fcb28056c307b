"""OC-CLIP's loss (`OCCLIPLoss`) beside the same loss at an earlier commit, on one batch: both terms and every gradient
compared, the seconds of a forward and backward pass each, and how many times each makes the host wait on the device a
step (`.item()`-like reads, `nonzero`, boolean masks: each one on a GPU waits for the work queued before it).

    .venv/bin/python benchmarks/occlip_loss_against.py --against 3bdf1fb    # the loss before it stopped selecting by masks

The batch: ViT-B-16's joint width (512), 197 patch tokens, `--batch` images whose captions hold 0 to 5 nodes (two with
none) and one relation fewer than their nodes, `--chunk` images scored at a time, seeded.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from compclip.methods.occlip import BindingModule, OCCLIPLoss  # noqa: E402

SIZED_BY_VALUES = {torch.ops.aten.nonzero.default, torch.ops.aten.masked_select.default, torch.ops.aten._local_scalar_dense.default}
INDEXING = {torch.ops.aten.index.Tensor, torch.ops.aten.index_put.default, torch.ops.aten.index_put_.default}


class Waits(TorchDispatchMode):
    """Counts the ops that make the host wait on the device (as tests/test_device_reads.py records them)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in SIZED_BY_VALUES or (func in INDEXING and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
                                                                for i in args[1] if i is not None)):
            self.count += 1
        return func(*args, **(kwargs or {}))


def earlier_loss(rev: str):
    """`OCCLIPLoss` as `methods/occlip.py` was at `rev`, imported beside today's compclip."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:src/compclip/methods/occlip.py"], capture_output=True, text=True,
                          check=True).stdout
    text = text.replace("from ..", "from compclip.").replace("from .", "from compclip.methods.")
    text = text.replace("\nregister_method(", "\n# register_method(")  # today's registry has the name already
    folder = Path(tempfile.mkdtemp())
    (folder / "occlip_earlier.py").write_text(text)
    spec = importlib.util.spec_from_file_location("occlip_earlier", folder / "occlip_earlier.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["occlip_earlier"] = module
    spec.loader.exec_module(module)
    return module.OCCLIPLoss


def batch(images: int, width: int = 512, patches: int = 197):
    g = torch.Generator().manual_seed(0)
    nodes = torch.randint(0, 6, (images,), generator=g)
    nodes[[1, images // 2]] = 0  # captions without a node
    node_image = torch.repeat_interleave(torch.arange(images), nodes)
    relation_image, ends = [], []
    for i, k in enumerate(nodes.tolist()):
        for _ in range(max(0, k - 1)):
            s, o = torch.randint(0, k, (2,), generator=g).tolist()
            relation_image.append(i)
            ends.append([s, o, o, s, (s + 1) % k, o])
    unit = lambda n: torch.nn.functional.normalize(torch.randn(n, width, generator=g), dim=-1).requires_grad_()  # noqa: E731
    return {"visual_tokens": torch.randn(images, patches, width, generator=g).requires_grad_(), "image_features": unit(images),
            "node_features": unit(len(node_image)), "node_image": node_image, "relation_features": unit(len(relation_image)),
            "relation_image": torch.tensor(relation_image), "relation_ends": torch.tensor(ends).reshape(-1, 6),
            "logit_scale": torch.tensor(20.0, requires_grad=True)}


def run(loss, module, inputs, waits=None):
    """Both terms, every gradient (inputs', then the module's) and the waits (counted into `waits`, a `Waits`, where given)
    of one forward and backward pass."""
    for t in inputs.values():
        t.grad = None
    module.zero_grad()
    with waits if waits is not None else contextlib.nullcontext():
        terms = loss(module, **inputs)
        sum(terms.values()).backward()
    grads = [t.grad for t in inputs.values() if t.grad is not None] + [p.grad for p in module.parameters()]
    return {k: float(v.detach()) for k, v in terms.items()}, grads, waits.count if waits is not None else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", required=True, help="the commit whose loss to compare")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--chunk", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    module, inputs = BindingModule(512, 1), batch(args.batch)
    losses = {args.against: earlier_loss(args.against)(1.0, args.chunk), "now": OCCLIPLoss(1.0, args.chunk)}
    results = {name: run(loss, module, inputs, Waits()) for name, loss in losses.items()}
    (then, grads_then, waits_then), (now, grads_now, waits_now) = results.values()
    worst = max(float((a - b).abs().max() / b.abs().max().clamp_min(1e-12)) for a, b in zip(grads_then, grads_now, strict=True))
    print(f"{args.batch} images, chunk {args.chunk}, {len(inputs['node_image'])} nodes, {len(inputs['relation_image'])} relations")
    for key in now:
        print(f"  {key}: {then[key]:.9f} at {args.against}, {now[key]:.9f} now, difference {now[key] - then[key]:.3g}")
    print(f"  gradients: the largest difference {worst:.3g} of the gradient's largest value")
    print(f"  waits on the device a step: {waits_then} at {args.against}, {waits_now} now")
    for name, loss in losses.items():
        run(loss, module, inputs)  # warm
        start = time.perf_counter()
        for _ in range(args.repeats):
            run(loss, module, inputs)
        print(f"  {name}: forward and backward {(time.perf_counter() - start) / args.repeats:.3f} s (the mean of {args.repeats})")


if __name__ == "__main__":
    main()
