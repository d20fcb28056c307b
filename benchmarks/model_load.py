"""Time to build and encode with each bundled config, compclip's load_model beside plain open_clip.

Target: a bundled config builds and encodes offline in under 2 s.
Run: .venv/bin/python benchmarks/model_load.py
"""
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import open_clip
import torch

from compclip.models import BUNDLED_MODELS, load_model

CAPTIONS = ["a red couch next to a white table", "a white couch next to a red table"]


def with_compclip(name):
    model, _, tokenizer = load_model(name)
    return model, tokenizer


def with_open_clip(name):
    model = open_clip.create_model(name).eval()
    return model, open_clip.SimpleTokenizer(context_length=model.context_length)


def build_and_encode(build, name) -> float:
    start = time.perf_counter()
    model, tokenizer = build(name)
    with torch.no_grad():
        model.encode_image(torch.randn(2, 3, 64, 64))
        model.encode_text(tokenizer(CAPTIONS))
    return time.perf_counter() - start


def main(repeats: int = 5) -> None:
    torch.manual_seed(0)
    print(f"{'model':24s} {'compclip s':>11s} {'open_clip s':>12s} {'ratio':>6s}")
    for name in BUNDLED_MODELS:
        ours = statistics.median(build_and_encode(with_compclip, name) for _ in range(repeats))
        peer = statistics.median(build_and_encode(with_open_clip, name) for _ in range(repeats))
        print(f"{name:24s} {ours:11.3f} {peer:12.3f} {ours / peer:6.2f}")
        assert ours < 2.0, f"{name}: {ours:.2f} s, target under 2 s"


if __name__ == "__main__":
    main()
