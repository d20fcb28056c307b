"""The time `compclip eval` takes per 1,000 items of each benchmark read from its official layout, beside SugarCrepe's:
VALSE, SVO-Probes, CREPE, SPEC, ImageCoDe and EqBen, each built here in its real file names and record fields with
generated images (one distinct image per image the benchmark names: what an item costs is mostly its images), scored
by ViT-B-32's architecture with random weights through compclip's scorer, fp32 on the CPU, images decoded by one
worker. An item is what the benchmark counts as one (ImageCoDe's: a description and its ten images; SPEC's: one query
either way).
Run: .venv/bin/python benchmarks/benchmark_speed.py [--items 200] [--model ViT-B-32] [--work /tmp/benchmark-speed]
"""
import argparse
import json
import time
from pathlib import Path

from PIL import Image


def image(path: Path, seed: int) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (320, 240), ((seed * 37) % 256, (seed * 91) % 256, (seed * 13) % 256)).save(path)
    return path.name


def build(root: Path, n: int) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each benchmark's files for `n` items under `root`: {label: (benchmark, splits)}."""
    caption = "a red couch next to a white table {}"
    suite = {}
    sc = root / "sugarcrepe"
    sc.mkdir(parents=True, exist_ok=True)
    (sc / "swap_att.json").write_text(json.dumps({str(k): {"filename": image(root / "coco" / "val2017" / f"{k:012d}.jpg", k),
                                                            "caption": caption.format(k), "negative_caption": caption.format(k + 1)}
                                                   for k in range(n)}))
    suite["sugarcrepe"] = ("sugarcrepe", ("swap_att",))
    valse = root / "valse" / "data"
    valse.mkdir(parents=True, exist_ok=True)
    (valse / "existence.json").write_text(json.dumps({f"e{k}": {
        "dataset": "visual7w", "image_file": image(valse / "visual7w" / "images" / f"v7w_{k}.jpg", k), "caption": caption.format(k),
        "foil": caption.format(-k), "mturk": {"caption": 3, "foil": 0, "other": 0}} for k in range(n)}))
    suite["valse"] = ("valse", ("existence",))
    svo = root / "svo_probes"
    rows = ["sentence,subj_neg,verb_neg,obj_neg,pos_image_id,neg_image_id"]
    for k in range(n):
        image(svo / "images" / f"{2 * k}.jpg", 2 * k)
        image(svo / "images" / f"{2 * k + 1}.jpg", 2 * k + 1)
        rows.append(f"{caption.format(k)},True,False,False,{2 * k},{2 * k + 1}")
    (svo / "svo_probes.csv").write_text("\n".join(rows) + "\n")
    suite["svo_probes"] = ("svo_probes", ("subj",))
    crepe = root / "crepe" / "prod_hard_negatives" / "swap"
    crepe.mkdir(parents=True, exist_ok=True)
    lines = ["image_id,x,y,width,height,caption,hard_negs"]
    for k in range(n):
        image(root / "visual_genome" / "VG_100K" / f"{k}.jpg", k)
        negatives = [caption.format(k + j) for j in range(1, 6)]
        lines.append(f'{k},10,10,200,150,{caption.format(k)},"{negatives!r}"')
    (crepe / "prod_vg_hard_negs_swap_complexity_4.csv").write_text("\n".join(lines) + "\n")
    suite["crepe"] = ("crepe", ("prod_swap_4",))
    spec = root / "spec" / "count"
    for k in range(4 * ((n + 1) // 2)):
        image(spec / "images" / f"{k}.jpg", k)
    (spec / "image2text.json").write_text(json.dumps([{"query": f"images/{k}.jpg", "keys": [caption.format(k + j) for j in range(4)],
                                                       "label": 0} for k in range(n // 2)]))
    (spec / "text2image.json").write_text(json.dumps([{"query": caption.format(k), "label": 0,
                                                       "keys": [f"images/{4 * k + j}.jpg" for j in range(4)]} for k in range(n - n // 2)]))
    suite["spec"] = ("spec", ("count",))
    code = root / "imagecode" / "data"
    sets = {}
    for k in range(n):
        for j in range(10):
            image(code / f"open-images-{k}" / f"img{j}.jpg", 10 * k + j)
        sets[f"open-images-{k}"] = {"3": caption.format(k)}
    code.mkdir(parents=True, exist_ok=True)
    (code / "valid_data.json").write_text(json.dumps(sets))
    suite["imagecode"] = ("imagecode", ("static",))
    eq = root / "eqben"
    records = []
    for k in range(n):
        records.append({"image0": f"eqbensd/{image(eq / 'images' / 'eqbensd' / f'{2 * k}.png', 2 * k)}", "caption0": caption.format(k),
                        "image1": f"eqbensd/{image(eq / 'images' / 'eqbensd' / f'{2 * k + 1}.png', 2 * k + 1)}",
                        "caption1": caption.format(-k)})
    (eq / "all_select.json").write_text(json.dumps(records))
    suite["eqben"] = ("eqben", ("eqbensd",))
    return suite


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--model", default="ViT-B-32")
    parser.add_argument("--work", default="/tmp/benchmark-speed")
    args = parser.parse_args()
    import open_clip
    import torch

    from compclip.eval import REGISTRY, DualEncoderScorer

    torch.manual_seed(0)
    root = Path(args.work) / f"data-{args.items}"
    suite = build(root, args.items)
    model, _, preprocess = open_clip.create_model_and_transforms(args.model)
    tokenizer = open_clip.get_tokenizer(args.model)
    rows = []
    for label, (name, splits) in suite.items():
        scorer = DualEncoderScorer(model, preprocess, tokenizer, workers=1)
        bench = REGISTRY[name]
        start = time.perf_counter()
        result = bench.run(scorer, root, bench.ties, splits, bench.Options())
        seconds = time.perf_counter() - start
        items = len(result.items)
        rows.append((label, items, seconds, 1000 * seconds / items, scorer.encoded["images"], scorer.encoded["texts"]))
    base = rows[0][3]
    print(f"{'benchmark':12s} {'items':>6s} {'s':>7s} {'s/1,000':>8s} {'× SC':>6s} {'images':>7s} {'texts':>6s}")
    for label, items, seconds, per, images, texts in rows:
        print(f"{label:12s} {items:6d} {seconds:7.1f} {per:8.1f} {per / base:6.2f} {images:7d} {texts:6d}")


if __name__ == "__main__":
    main()
