"""Two per-step costs of training the binding world's model on a CPU, each beside what it replaced.

    python benchmarks/train_overheads.py

1. The reader seeds each sample's augmentation. `torch.manual_seed` also queues a lazy seeding of
   every accelerator backend, capturing a Python stack each time; the reader now seeds the CPU
   generator alone (`torch.default_generator.manual_seed`), which draws the same numbers.
2. The optimizer: AdamW over the demo model's parameters (`compclip-tiny-siglip-conv`, 3.5 M, most of
   them the text tower's token embedding) as torch runs it on a CPU by default (one tensor at a
   time) and fused, as the trainer now builds it. The parameters after the steps are compared.
Medians of 5 repeats; the ratio is old / new.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from compclip.demo import MODEL
from compclip.models import load_model
from compclip.train.optim import param_groups


def per_call(fn, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        fn(i)
    return (time.perf_counter() - start) / n


def median_of(fn, repeats: int = 5) -> float:
    return statistics.median(fn() for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20_000, help="seedings per repeat (one per sample)")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per repeat")
    args = parser.parse_args()
    torch.set_num_threads(2)

    torch.manual_seed(7)
    a = torch.rand(8)
    torch.default_generator.manual_seed(7)
    assert torch.equal(a, torch.rand(8)), "the two seedings must draw the same numbers"
    old = median_of(lambda: per_call(torch.manual_seed, args.seeds))
    new = median_of(lambda: per_call(torch.default_generator.manual_seed, args.seeds))
    print("| per-sample seeding | µs per sample | ms per batch of 128 |")
    print("| --- | --- | --- |")
    print(f"| `torch.manual_seed` | {old * 1e6:.1f} | {old * 128e3:.2f} |")
    print(f"| `torch.default_generator.manual_seed` | {new * 1e6:.1f} | {new * 128e3:.2f} |")
    print(f"| **ratio** | **{old / new:.1f}×** | |")
    print()

    torch.manual_seed(0)
    model, _, _ = load_model(MODEL)
    torch.manual_seed(1)
    grads = [torch.randn_like(p) for p in model.parameters()]
    times, finals = {}, {}
    for name, kwargs in (("per tensor (torch's CPU default)", {"foreach": False}), ("fused (the trainer's)", {"fused": True})):
        copy_ = copy.deepcopy(model)
        for p, g in zip(copy_.parameters(), grads, strict=True):
            p.grad = g.clone()
        opt = torch.optim.AdamW(param_groups(copy_.named_parameters(), 0.1), lr=1e-3, **kwargs)  # the demo base's weight decay and rate
        opt.step()  # state allocated outside the timing
        times[name] = median_of(lambda opt=opt: per_call(lambda _: opt.step(), args.steps))
        finals[name] = torch.cat([p.detach().flatten() for p in copy_.parameters()])
    (slow, t_old), (fast, t_new) = times.items()
    gap = (finals[slow] - finals[fast]).abs().max().item()
    n = sum(p.numel() for p in model.parameters())
    print(f"| AdamW step over {n / 1e6:.2f} M parameters | ms |")
    print("| --- | --- |")
    print(f"| {slow} | {t_old * 1e3:.2f} |")
    print(f"| {fast} | {t_new * 1e3:.2f} |")
    print(f"| **ratio** | **{t_old / t_new:.1f}×** |")
    print(f"\nlargest parameter difference after {1 + 5 * args.steps} identical steps: {gap:.2e}")


if __name__ == "__main__":
    main()
