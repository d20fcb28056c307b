"""`compclip world generate`: the binding world's splits and benchmarks, written in parallel, cached.

- `train/` and `val/`: `images.npy` (uint8, N × size × size × 3, read memory-mapped by
  `compclip.data.ArrayReader`: no image decoding while training) and `scenes.jsonl` (one record
  per image: scene, caption, phrases, and `dense_captions`, the objects' phrases and the neighbours' statements, for DAC);
  `train/` also holds each scene's hard negative, for TripletCLIP: `negative_image.npy`, the scene rendered with two
  objects' colours exchanged (`colour_swap`; one recoloured where no two can be), and in its record `negative_scene`,
  `negative_caption` (its caption, drawn as the scene's is, so the same sentences with the colours exchanged) and
  `negative_image` (its row; null for a scene with no negative, which TripletCLIP skips and counts); and its distractor,
  for CoN-CLIP: `distractor_image.npy`, the scene with one object taken out (`remove_one`), and in its record
  `distractor_scene`, `distractor_image` (its row) and `negated_caption`, the objects left and the one taken out named as
  absent (`negated_caption`: false for the scene, true for its distractor);
- `singles/` (`n_singles` > 0): single objects of the seen pairings in the same format, with short
  captions for a base's curriculum: `shape_caption` names only the shape ("a star"), `caption` cycles
  through "a red star", "a star" and "something red". Colour alone finds a scene in a contrastive batch,
  so a tower first shown colours never learns shape (`docs/benchmarks.md`); these captions let it
  learn shape first;
- `test_seen/`, `test_unseen/`: data roots laid out as `compclip eval` reads them
  (`coco/val2017/`, `sugarcrepe/`, `sugarcrepe_pp/`, `zeroshot/{shape,color}/`, `retrieval/world/`).

By default 25 % of the colour×shape pairings never appear in train or val (images or captions);
`test_unseen` scenes each contain one of them, and its benchmarks ask about it. The caption
knobs (`density`, `completeness`, `saliency`) are the levers the binding literature names
(`docs/methods.md`); the test splits' benchmarks do not depend on them.
"""
from __future__ import annotations

import json
import random
import shutil
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from .. import stops
from ..eval.benchmarks.sugarcrepe import SPLITS as SC_SPLITS
from ..eval.benchmarks.sugarcrepe_pp import SPLITS as SCPP_SPLITS
from ..io import atomic_path, write_json
from ..progress import progress
from .captions import dense_captions, holds, long_caption, negated_caption, negatives, pair_statement, short_phrases, single_captions
from .config import WorldConfig, heldout_count
from .scene import COLORS, SHAPES, Scene, colour_swap, place, remove_one, render

# of the benchmark files: 2 keeps the seen split's negatives to seen pairings, 3 links each zero-shot image's colour copy to its
# shape copy, 4 adds each scene's dense captions, 5 each training scene's negative (TripletCLIP's), 6 its distractor and
# negated caption (CoN-CLIP's); a world of another format is made again
FORMAT = 6
TRAIN_IMAGE_FIELDS = ("negative_image", "distractor_image")  # the training scenes' image fields, each an array beside images.npy
SPLIT_CODES = {"train": 1, "val": 2, "test_seen": 3, "test_unseen": 4, "zs_seen": 5, "zs_unseen": 6, "singles": 7}


def heldout_pairs(seed: int, fraction: float, colors=tuple(COLORS), shapes=SHAPES) -> list[tuple[str, str]]:
    """A seeded fraction of colour×shape pairs, leaving every colour and shape some seen pairing."""
    pairs = [(c, s) for c in colors for s in shapes]
    rng = random.Random(seed)
    while True:
        held = sorted(rng.sample(pairs, heldout_count(fraction, len(pairs))))
        seen = set(pairs) - set(held)
        if {c for c, _ in seen} == set(colors) and {s for _, s in seen} == set(shapes):
            return held


def _scene(cfg: WorldConfig, split: str, index: int, held: list[tuple[str, str]]) -> Scene:
    seed = (cfg.seed * 7 + SPLIT_CODES[split]) * 10_000_019 + index
    rng = random.Random(seed)
    colors, shapes = cfg.palette
    seen = [(c, s) for c in colors for s in shapes if (c, s) not in held]
    if split.startswith("zs") or split == "singles":
        return place(rng, seed, [rng.choice(held if split == "zs_unseen" else seen)])
    fewest = max(2, cfg.min_objects) if split.startswith("test") else cfg.min_objects
    n = rng.randint(fewest, cfg.max_objects)
    if split == "test_unseen":
        return place(rng, seed, [rng.choice(held), *rng.sample(seen, n - 1)])
    return place(rng, seed, rng.sample(seen, n))


def _work(task: tuple[WorldConfig, str, int, str | None, list]) -> tuple[dict[str, Any], bytes | None, dict[str, bytes]]:
    """One scene: its record, its pixels when they go to an array (else it is saved as `path`, a PNG), and a training
    scene's image fields' pixels by field (`TRAIN_IMAGE_FIELDS`; a field it has none of is absent)."""
    cfg, split, index, path, held = task
    scene = _scene(cfg, split, index, held)
    image = render(scene, cfg.size)
    if path is not None:
        image.save(path, format="PNG")
    fields: dict[str, bytes] = {}
    if split == "singles":
        record = {"index": index, "scene": scene.to_dict(), **single_captions(scene, index)}
    else:
        caption = caption_of(scene, cfg)
        record = {"index": index, "scene": scene.to_dict(), "caption": caption, "phrases": short_phrases(scene),
                  "dense_captions": dense_captions(scene)}
    if split == "train":  # TripletCLIP's data fields: the negative image (a row of negative_image.npy) and its caption
        colors, shapes = cfg.palette
        allowed = {(c, s) for c in colors for s in shapes} - {tuple(p) for p in held}
        negative = colour_swap(scene, random.Random(scene.seed + 4), allowed, colors)
        record |= {"negative_scene": None, "negative_caption": None, "negative_image": None} if negative is None else {
            "negative_scene": negative.to_dict(), "negative_caption": caption_of(negative, cfg), "negative_image": index}
        if negative is not None:
            fields["negative_image"] = render(negative, cfg.size).tobytes()
        # CoN-CLIP's: the distractor (a row of distractor_image.npy) and the negated caption that holds for it alone
        kept, gone = remove_one(scene, random.Random(scene.seed + 5))
        record |= {"distractor_scene": kept.to_dict(), "negated_caption": negated_caption(kept, gone), "distractor_image": index}
        fields["distractor_image"] = render(kept, cfg.size).tobytes()
    return record, None if path is not None else image.tobytes(), fields


def caption_of(scene: Scene, cfg: WorldConfig) -> str:
    """A scene's caption: with chance `cfg.statements` (when it has two objects or more) a statement about two of them
    as the benchmarks phrase theirs, else its long description. Each draw has its own generator, so that no setting
    moves another's draws."""
    pick = random.Random(scene.seed + 3)
    if len(scene.objects) >= 2 and pick.random() < cfg.statements:
        return pair_statement(*pick.sample(list(scene.objects), 2)).text()
    return long_caption(scene, random.Random(scene.seed + 1), cfg.density, cfg.completeness, cfg.saliency)


def _render_all(cfg: WorldConfig, split: str, n: int, folder: Path, held, pool) -> list[dict[str, Any]]:
    """Render a split as PNG files in `folder`, or, for a folder named `*.npy`, into that array."""
    array = folder.suffix == ".npy"
    folder.parent.mkdir(parents=True, exist_ok=True) if array else folder.mkdir(parents=True, exist_ok=True)
    tasks = [(cfg, split, i, None if array else str(folder / f"{split}_{i:06d}.png"), held) for i in range(n)]
    jobs = pool.imap(_work, tasks, chunksize=64) if pool else map(_work, tasks)
    records = []
    names = TRAIN_IMAGE_FIELDS if split == "train" else ()
    shape = (n, cfg.size, cfg.size, 3)
    with ExitStack() as stack:
        arrays = {name: np.lib.format.open_memmap(stack.enter_context(atomic_path(path)), "w+", np.uint8, shape)
                  for name, path in (({"images": folder} if array else {}) | {f: folder.with_name(f"{f}.npy") for f in names}).items()}
        # a scene without a negative keeps a row of zeros, which its record (negative_image null) never names
        for record, data, fields in progress(jobs, f"world {split}", total=n, unit="image"):
            for name, pixels in (({"images": data} if array else {}) | fields).items():
                arrays[name][record["index"]] = np.frombuffer(pixels, np.uint8).reshape(cfg.size, cfg.size, 3)
            records.append(record)
        for name in list(arrays):  # flushed and closed before each is moved into place
            arrays.pop(name).flush()
    return records


def _write_lines(path: Path, rows: list[dict]) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _write_csv(path: Path, pairs: list[tuple[str, str]]) -> None:
    import csv
    import io

    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["image", "caption"])
    writer.writerows(pairs)
    with atomic_path(path) as tmp:
        tmp.write_text(buf.getvalue(), encoding="utf-8")


def _benchmarks(root: Path, records: list[dict], held: list[tuple[str, str]], unseen: bool, colors, shapes) -> None:
    """world-SugarCrepe and world-SugarCrepe++ from the test scenes, each positive true, each negative false. The seen
    split's negatives name seen pairings only, so that no text prior about held-out pairings can tell them false."""
    held = {tuple(p) for p in held}
    sc: dict[str, dict[str, dict]] = {s: {} for s in SC_SPLITS}
    pp: dict[str, list[dict]] = {s: [] for s in SCPP_SPLITS}
    for rec in records:
        scene = Scene.from_dict(rec["scene"])
        rng = random.Random(scene.seed + 2)
        objects = list(scene.objects)
        # the unseen split asks about its held-out pairing
        first = next(o for o in objects if (o.color, o.shape) in held) if unseen else rng.choice(objects)
        second = rng.choice([o for o in objects if o is not first])
        pos = pair_statement(first, second)
        if not holds(scene, pos):  # the generator's own invariant: a failure here is a bug, not bad input
            raise RuntimeError(f"test scene {rec['index']}: the positive caption {pos.text()!r} does not hold in its scene")
        filename = f"test_{'unseen' if unseen else 'seen'}_{rec['index']:06d}.png"
        for split, neg in negatives(scene, first, second, rng, shapes, colors).items():
            if not unseen and neg.pairings() & held:  # a text prior ("an unknown pairing is false") would pass it unseen
                continue
            sc[split][str(len(sc[split]))] = {"filename": filename, "caption": pos.text(), "negative_caption": neg.text()}
            if split in pp:
                pp[split].append({"id": len(pp[split]), "filename": filename, "caption": pos.text(),
                                  "caption2": pos.paraphrase(), "negative_caption": neg.text()})
    for split in SC_SPLITS:
        write_json(root / "sugarcrepe" / f"{split}.json", sc[split])
    for split in SCPP_SPLITS:
        write_json(root / "sugarcrepe_pp" / f"{split}.json", pp[split])


def _zeroshot(root: Path, records: list[dict], folder: Path) -> None:
    """Single-object scenes sorted into class folders by shape and by colour: each image a file in its shape's folder
    and a link to it from its colour's, so an evaluation encodes it once (the scorer knows an image by its real path)."""
    for rec in records:
        obj = rec["scene"]["objects"][0]
        source = folder / rec["file"]
        shape = root / "zeroshot" / "shape" / obj["shape"] / source.name
        color = root / "zeroshot" / "color" / obj["color"] / source.name
        for target in (shape, color):
            target.parent.mkdir(parents=True, exist_ok=True)
        shape.write_bytes(source.read_bytes())
        color.unlink(missing_ok=True)
        color.symlink_to(Path("..", "..", "shape", obj["shape"], source.name))
    shutil.rmtree(folder)
    for task, lines in (("shape", "a {}.\na picture of a {}.\na {} shape.\n"), ("color", "a {} shape.\nsomething {}.\na {} thing.\n")):
        (root / "zeroshot" / task).mkdir(parents=True, exist_ok=True)
        (root / "zeroshot" / task / "templates.txt").write_text(lines)


WORLD_FOLDERS = ("train", "val", "singles", "test_seen", "test_unseen")  # what `generate` writes beside its manifest


def generate(out: str | Path, cfg: WorldConfig = WorldConfig(), workers: int = 2) -> Path:
    """Write the world to `out`; a folder made with the same settings is reused as it is."""
    out = Path(out)
    manifest = out / "manifest.json"
    made = json.loads(manifest.read_text()) if manifest.is_file() else {}
    if made.get("config") == asdict(cfg) and made.get("format") == FORMAT:
        return out
    if made:  # another world was made here: none of its files may stay beside the new one's (a class folder would hold both)
        manifest.unlink()
        for name in WORLD_FOLDERS:
            if (out / name).is_dir() and not (out / name).is_symlink():
                shutil.rmtree(out / name)
    held = heldout_pairs(cfg.seed, cfg.heldout, *cfg.palette)
    pool = stops.pool(workers) if workers > 1 else None
    try:
        for split, n in (("train", cfg.n_train), ("val", cfg.n_val), ("singles", cfg.n_singles)):
            if n == 0:
                continue
            records = _render_all(cfg, split, n, out / split / "images.npy", held, pool)
            _write_lines(out / split / "scenes.jsonl", records)
        for name, zs in (("test_seen", "zs_seen"), ("test_unseen", "zs_unseen")):
            root = out / name
            records = _render_all(cfg, name, cfg.n_test, root / "coco" / "val2017", held, pool)
            _benchmarks(root, records, held, name == "test_unseen", *cfg.palette)
            _write_csv(root / "retrieval" / "world" / "captions.csv",
                       [(f"../../coco/val2017/{name}_{r['index']:06d}.png", r["caption"]) for r in records])
            _write_lines(root / "scenes.jsonl", records)
            singles = _render_all(cfg, zs, cfg.n_test, root / "singles", held, pool)
            for r in singles:
                r["file"] = f"{zs}_{r['index']:06d}.png"
            _zeroshot(root, singles, root / "singles")
    finally:
        stops.end_pool(pool)
    write_json(manifest, {"config": asdict(cfg), "heldout": held, "format": FORMAT})
    return out
