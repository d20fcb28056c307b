"""What per-item results cost `compclip eval` on SugarCrepe's 7 splits: the time spent making the rows and writing them
as Parquet, against the whole evaluation's. Target: at most 5 % of it.

Stand-in images under SugarCrepe's real COCO file names (no COCO images exist here), the ViT-B-32 architecture with
random weights (the per-item cost does not depend on them; the evaluation's does, as a real model's would), fp32 on the
CPU. The row-making and writing functions are timed where the benchmarks call them, in the same run.
Run: .venv/bin/python benchmarks/items_cost.py [--model ViT-B-32] [--work /tmp/items-cost]
"""
import argparse
import functools
import json
import time
from pathlib import Path

from PIL import Image

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
SPLITS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")


def stand_ins(root: Path) -> None:
    images = root / "coco" / "val2017"
    if images.is_dir():
        return
    images.mkdir(parents=True)
    names = {r["filename"] for s in SPLITS for r in json.loads((SHARED / "sugarcrepe" / f"{s}.json").read_text()).values()}
    for name in sorted(names):
        seed = int(name.split(".")[0])
        Image.new("RGB", (64, 48), ((seed * 37) % 256, (seed * 91) % 256, (seed * 13) % 256)).save(images / name)
    (root / "sugarcrepe").symlink_to(SHARED / "sugarcrepe")


def timed(module, name: str, spent: list[float]):
    """Replace `module.name` by a wrapper adding its seconds to `spent`."""
    inner = getattr(module, name)

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    setattr(module, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="ViT-B-32")
    parser.add_argument("--work", default="/tmp/items-cost")
    args = parser.parse_args()
    import open_clip
    import torch

    from compclip.eval import run as harness
    from compclip.eval.benchmarks import sugarcrepe

    work = Path(args.work)
    stand_ins(work / "data")
    spent: list[float] = []
    timed(sugarcrepe, "choice_rows", spent)
    timed(harness, "write_items", spent)
    torch.manual_seed(0)
    model, _, preprocess = open_clip.create_model_and_transforms(args.model)
    tokenizer = open_clip.get_tokenizer(args.model)
    start = time.perf_counter()
    harness.evaluate_model(model, preprocess, tokenizer, "sugarcrepe", data_root=work / "data", out=work / "results", workers=2,
                           batch_size=64)
    total = time.perf_counter() - start
    rows = sum(1 for _ in (work / "results").glob("*.items.parquet"))
    print(f"{args.model}: compclip eval on SugarCrepe's 7 splits {total:.1f} s; per-item rows and Parquet {sum(spent):.3f} s "
          f"({100 * sum(spent) / total:.2f} % of it, target <= 5 %); {rows} items file(s)")


if __name__ == "__main__":
    main()
