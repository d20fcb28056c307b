"""The transformers export at full size: open_clip's own forward pass against the converted CLIPModel / SiglipModel, and
LLaVA's layer (CLIPVisionModel's hidden_states[-2]) against open_clip's penultimate block, on random weights (no
pretrained weights here). The tests run every open_clip ViT config at 2 blocks of width 64; this runs the real sizes.

    python benchmarks/hf_export_check.py [NAME ...]   # default: ViT-B-32 ViT-B-16 ViT-L-14-336-quickgelu ViT-B-16-SigLIP
    python benchmarks/hf_export_check.py --crops /path/to/images   # how many photos transformers' centre crop moves
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from compclip.export import hf as to_hf
from compclip.models import load_model


def check(name: str) -> None:
    start = time.perf_counter()
    model, _, _ = load_model(name)
    hf, kind = to_hf.convert(model)
    converted = time.perf_counter() - start
    d_image, d_text = to_hf.agreement(model, hf, kind)
    line = f"{name}: {kind}, {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters, converted in {converted:.1f} s; " \
           f"max |Δ| normalised embeddings: image {d_image:.1e}, text {d_text:.1e}"
    if kind == "clip":
        blocks, seen = model.visual.transformer.resblocks, {}
        hook = blocks[len(blocks) - 2].register_forward_hook(lambda m, i, o: seen.setdefault("x", o))
        size = hf.config.vision_config.image_size
        pixels = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            model.encode_image(pixels)
            states = hf.vision_model(pixel_values=pixels, output_hidden_states=True).hidden_states
        hook.remove()
        line += f"; hidden_states[-2] vs penultimate block: {(states[-2] - seen['x']).abs().max():.1e}"
    print(line, flush=True)


def crops(folder: Path, sizes=(224, 336, 384)) -> None:
    from PIL import Image

    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    for size in sizes:
        moved = 0
        for f in files:
            w, h = Image.open(f).size
            margin = int(size * max(w, h) / min(w, h)) - size  # torchvision's resized long side, less the crop
            moved += margin % 4 == 3  # round-half-even puts the crop one pixel past transformers' floor
        print(f"{size} px: the centre crop differs for {moved} of {len(files)} photos ({moved / len(files):.1%})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", default=["ViT-B-32", "ViT-B-16", "ViT-L-14-336-quickgelu", "ViT-B-16-SigLIP"])
    parser.add_argument("--crops", type=Path, help="a folder of photos")
    args = parser.parse_args()
    if args.crops:
        crops(args.crops)
    else:
        for n in args.names:
            check(n)
