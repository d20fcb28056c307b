"""Per-item results: one row per scored item, written beside a benchmark's result JSON as `<result>.items.parquet`.

Every row has the same leading columns, whatever the benchmark: `split`, `item` (the item's id as the official file
names it: its key, its `id` field, else its position in the file), `image` (the image file, or the Parquet shard and row
of an image held in one, relative to the data root the result records once as `data_root`; absolute where it lies
elsewhere), `true` and `false` (the true caption and the false one the model scored highest), their
scores `score_true` and `score_false`, `correct` (under the run's tie rule) and `tie` (the two scores equal). A
benchmark adds its own columns after them: every option's text and score (`texts`, `scores`), Winoground's and
InpaintCOCO's second image and partial scores, a retrieval query's direction and rank. `compclip.load_items` reads
them back as one DataFrame.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..data.images import image_ref

IMAGES = ("image", "image_2")  # the columns that name an image
COLUMNS = ("split", "item", "image", "true", "false", "score_true", "score_false", "correct", "tie")
SUFFIX = ".items.parquet"


# a scored item by what it is (`identity`), and which copy of an identical item where a split repeats one
IDENTITY = ["benchmark", "split", "item", "identity", "copy"]


def identity(items):
    """What makes each row's item that item whatever model scored it, as a 64-bit hash: its image (and second image),
    and what it offers, model by model the same: every option of a choice (`texts`), a grid's two captions, a retrieval
    query's direction (and a caption query's caption), a class item's true class. Not `false` where an item offers more
    than two options, nor an image query's `true`: those are what the model scored highest. Rows of another release
    or subset under the same ids then differ here. Column by column, not row by row: a gallery of 200,000 items."""
    import numpy as np
    import pandas as pd

    def column(name: str) -> pd.Series:
        return items[name] if name in items.columns else pd.Series(None, index=items.index, dtype=str)

    def text(values: pd.Series) -> pd.Series:
        if isinstance(values.dtype, pd.StringDtype):  # strings or missing: no row to look at one by one
            return values.fillna("")
        return values.map(lambda v: "" if v is None or isinstance(v, float) else str(v))

    def named(values: pd.Series) -> pd.Series:
        return values.notna() if isinstance(values.dtype, pd.StringDtype) else values.map(lambda v: isinstance(v, str))

    texts = column("texts")
    options = texts.map(lambda t: None if t is None or isinstance(t, float) else "\x1e".join(map(str, t))) if texts.dtype == object \
        else texts  # no column of options: missing in every row
    direction, true = text(column("direction")), text(column("true"))
    grid = named(column("image_2")) & (direction == "")  # a retrieval's image_2 is the model's pick
    query = direction + "\x1e" + np.where(direction == "text→image", true, "")  # an image query's `true` is the model's pick
    offered = np.where(grid, text(column("image_2")) + "\x1e" + true + "\x1e" + text(column("false")),
                       np.where(options.notna(), options.fillna(""), np.where(direction != "", query, true)))
    return pd.util.hash_pandas_object(text(column("image")) + "\x1f" + pd.Series(offered, index=items.index), index=False)


def identified(items, by: list[str]):
    """`items` with their `identity` and `copy` (the k-th row of an identical item among the rows that share `by`: one
    model's, one run's), the columns `IDENTITY` pairs them on."""
    items = items.assign(identity=identity(items))
    return items.assign(copy=items.groupby([*by, "identity"]).cumcount())


def write_items(path: Path, rows: list[dict[str, Any]]) -> None:
    """The rows as Parquet, written atomically (the leading columns even when no item was scored)."""
    import pandas as pd

    from ..io import atomic_path

    frame = pd.DataFrame(rows) if rows else pd.DataFrame({c: [] for c in COLUMNS})
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


def root_relative(file: Path, root: Path) -> str:
    """`file` as a result names it: relative to the data root (as `/`-joined text), or absolute where it lies elsewhere."""
    if file.is_relative_to(root):  # as the benchmark made it: the root joined with the file's place (no file system call)
        return file.relative_to(root).as_posix()
    resolved = root.resolve()
    return file.relative_to(resolved).as_posix() if file.is_relative_to(resolved) else str(file.resolve())


def relative_images(rows: list[dict[str, Any]], root: Path) -> list[dict[str, Any]]:
    """The rows with each image (`IMAGES`: a file, or `shard::member` of one held in a Parquet shard) named relative to
    the data root, which the result records once: a results folder read from another working folder, or with the data
    moved (`compclip report --data-root`), still finds them."""
    names: dict[str, str] = {}

    def relative(image: Any) -> Any:
        if not isinstance(image, str) or not image:
            return image
        if image not in names:
            file, sep, member = image.partition("::")
            names[image] = root_relative(Path(file), root) + sep + member
        return names[image]

    return [{**row, **{c: relative(row[c]) for c in IMAGES if c in row}} for row in rows]


def resolved_images(items, root: str | None, moved_to: Path | None = None):
    """`items` (one items file's DataFrame) with each image a path that opens from any working folder: a relative one
    under `moved_to` (`report --data-root`: where the data lies now) or else under the recorded `root`. The images of a
    result that recorded no root (an older compclip's: absolute, or relative to where it ran) are left as written."""
    if not root:
        return items
    base = moved_to if moved_to is not None else Path(root)
    paths: dict[str, str] = {}

    def resolved(image: Any) -> Any:
        if not isinstance(image, str) or not image or Path(image.partition("::")[0]).is_absolute():
            return image
        if image not in paths:
            paths[image] = str(base / image)
        return paths[image]

    return items.assign(**{c: items[c].map(resolved) for c in IMAGES if c in items.columns})


def image_name(image: Any) -> str:
    """An image as a row names it: its file, or `shard.parquet[row]` for one held in a Parquet cell."""
    return image_ref(image).key


def choice_rows(split: str, ids: Sequence[Any], images: Sequence[Any], texts: Sequence[Sequence[str]],
                scores: torch.Tensor | Sequence[Sequence[float]], correct: torch.Tensor, n_true: int = 1) -> list[dict[str, Any]]:
    """Items whose image chooses among caption options, the `n_true` true ones first (SugarCrepe, SugarCrepe++'s ITT, ARO,
    What'sUp, VL-CheckList, concept ranking), `scores` one row per item (items may have different numbers of options):
    `true` is the weakest true option, `false` the strongest false one."""
    rows = []
    scores = scores.tolist() if isinstance(scores, torch.Tensor) else scores
    for item, image, options, row, ok in zip(ids, images, texts, scores, correct.tolist(), strict=True):
        t = min(range(n_true), key=row.__getitem__)
        f = max(range(n_true, len(row)), key=row.__getitem__)
        rows.append({"split": split, "item": str(item), "image": image_name(image), "true": options[t], "false": options[f],
                     "score_true": row[t], "score_false": row[f], "correct": bool(ok), "tie": row[t] == row[f],
                     "texts": list(options), "scores": row})
    return rows


def grid_rows(split: str, ids: Sequence[Any], images: Sequence[tuple[Any, Any]], texts: Sequence[tuple[str, str]],
              scores: torch.Tensor, correct: torch.Tensor, parts: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    """Items of two images and two captions, `scores[n, caption, image]` (Winoground, InpaintCOCO): `true` and `false` are
    the first image's own caption and the other one; `parts` are the partial verdicts (Winoground's text and image
    scores), each a column."""
    clash = set(parts) & {*COLUMNS, "image_2", "scores"}
    if clash:
        raise ValueError(f"partial verdicts {sorted(clash)} would overwrite the item's own columns")
    rows = []
    s = scores.tolist()
    for k, (item, (image_0, image_1), (caption_0, caption_1), ok) in enumerate(zip(ids, images, texts, correct.tolist(), strict=True)):
        grid = s[k]
        rows.append({"split": split, "item": str(item), "image": image_name(image_0), "true": caption_0, "false": caption_1,
                     "score_true": grid[0][0], "score_false": grid[1][0], "correct": bool(ok), "tie": grid[0][0] == grid[1][0],
                     "image_2": image_name(image_1), "scores": [grid[0][0], grid[0][1], grid[1][0], grid[1][1]],
                     **{name: bool(v[k]) for name, v in parts.items()}})
    return rows


def image_choice_rows(split: str, ids: Sequence[Any], images: Sequence[Sequence[Any]], captions: Sequence[str],
                      scores: Sequence[Sequence[float]], labels: Sequence[int], correct: torch.Tensor) -> list[dict[str, Any]]:
    """Items whose caption chooses among images (SVO-Probes, SPEC's text-to-image), one row of scores per item and the
    true image's place in it (`labels`): `image` the true image and `image_2` the strongest false one, `true` and
    `false` both the caption, their scores the caption's with each."""
    rows = []
    for item, options, caption, row, label, ok in zip(ids, images, captions, scores, labels, correct.tolist(), strict=True):
        row = list(map(float, row))
        f = max((k for k in range(len(row)) if k != label), key=row.__getitem__)
        rows.append({"split": split, "item": str(item), "image": image_name(options[label]), "true": caption, "false": caption,
                     "score_true": row[label], "score_false": row[f], "correct": bool(ok), "tie": row[label] == row[f],
                     "image_2": image_name(options[f]), "scores": row})
    return rows


def class_rows(split: str, files: Sequence[Path], labels: Sequence[int], names: Sequence[str], scores: torch.Tensor,
               correct: torch.Tensor, root: Path) -> list[dict[str, Any]]:
    """Zero-shot classification: each image's true class and the wrong class it scored highest."""
    rows = []
    others = scores.clone()
    if len(labels):
        others[torch.arange(len(labels)), torch.as_tensor(labels)] = float("-inf")
    best = others.argmax(dim=1).tolist() if len(labels) else []
    for k, (file, label, ok) in enumerate(zip(files, labels, correct.tolist(), strict=True)):
        true, false = float(scores[k, label]), float(scores[k, best[k]])
        rows.append({"split": split, "item": str(Path(file).relative_to(root)), "image": str(file), "true": names[label],
                     "false": names[best[k]], "score_true": true, "score_false": false, "correct": bool(ok), "tie": true == false})
    return rows


def retrieval_rows(split: str, images: Sequence[Any], captions: Sequence[str], owner: torch.Tensor, scores: torch.Tensor,
                   ranks: tuple[torch.Tensor, torch.Tensor]) -> list[dict[str, Any]]:
    """Retrieval, one row per query: each caption finding its image (`direction` text→image), each image finding one of
    its captions (image→text); `rank` of the first match (0: retrieved first, `correct` at R@1), `false` the best wrong
    candidate (a caption; for a caption's query the image retrieved in its image's place, also as `image_2`)."""
    rows = []
    t2i_rank, i2t_rank = (r.tolist() for r in ranks)
    own = scores[torch.arange(len(captions)), owner]  # (captions,)
    wrong_image = scores.masked_fill(owner[:, None] == torch.arange(len(images))[None, :], float("-inf")).max(dim=1)
    for q, caption in enumerate(captions):
        image, other = int(owner[q]), int(wrong_image.indices[q])
        rows.append({"split": split, "item": f"caption {q}", "image": image_name(images[image]), "true": caption,
                     "false": f"image {image_name(images[other])}", "score_true": float(own[q]),
                     "score_false": float(wrong_image.values[q]), "correct": t2i_rank[q] == 0,
                     "tie": float(own[q]) == float(wrong_image.values[q]), "direction": "text→image", "rank": t2i_rank[q],
                     "image_2": image_name(images[other])})  # the image retrieved in its own's place, shown beside it
    mine = owner[None, :] == torch.arange(len(images))[:, None]  # (images, captions)
    by_image = scores.T
    best_own = by_image.masked_fill(~mine, float("-inf")).max(dim=1)
    best_other = by_image.masked_fill(mine, float("-inf")).max(dim=1)
    for i, image in enumerate(images):
        true, false = int(best_own.indices[i]), int(best_other.indices[i])
        rows.append({"split": split, "item": f"image {i}", "image": image_name(image), "true": captions[true], "false": captions[false],
                     "score_true": float(best_own.values[i]), "score_false": float(best_other.values[i]), "correct": i2t_rank[i] == 0,
                     "tie": float(best_own.values[i]) == float(best_other.values[i]), "direction": "image→text", "rank": i2t_rank[i]})
    return rows
