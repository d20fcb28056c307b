"""SPEC (Peng et al., CVPR 2024): size, position, existence and count, each a set of images and a set of texts that
differ in that one concept; scored both ways.

Layout: the Hub dataset wjpoom/SPEC's `data.zip` extracted into `spec/` as the release's notebook extracts it (its
`data_root`): one folder a subset, `spec/<subset>/image2text.json` and `text2image.json` with the images they name,
relative to the subset's folder.

Rule: the release's `spec/eval.py` with `spec/dataset.py` and the model wrappers (`clip_wrapper.py`, `i2t_evaluate`,
`t2i_evaluate`): image to text, each query image against its candidate texts (`keys`), right when the argmax is its
`label`; text to image, each query text against its candidate images, likewise; a subset's two accuracies, and the
mean of each over the subsets evaluated (`i2t`, `t2i`). The argmax takes the first of equal scores, so the official
tie rule is CLIP_benchmark's (a tie is right when the label comes first among the tied); `--ties strict` counts it
wrong. A candidate image not there leaves its item out, counted missing. A sample not of the release's format (`query`
a text, `keys` a list of two texts or more, `label` a whole number indexing them) is skipped and named by its file and
index; a subset's file that is not a list of samples is named and that subset not scored.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ...errors import DataError
from .. import protocols
from ..base import (
    Benchmark,
    Malformed,
    Missing,
    Result,
    integer_problem,
    json_records,
    mean_present,
    rate,
    register,
    text_problem,
    well_formed,
)
from ..items import choice_rows, image_choice_rows

SUBSETS = ("absolute_size", "relative_size", "absolute_spatial", "relative_spatial", "existence", "count")
KINDS = {"absolute_spatial": "spatial", "relative_spatial": "spatial", "absolute_size": "attribute", "relative_size": "attribute",
         "existence": "negation", "count": "counting"}


@register
class SPEC(Benchmark):
    name = "spec"
    task = "image_caption_selection"
    ties = "clip_benchmark"  # the release's argmax
    splits = SUBSETS
    layout = ("SPEC: the Hub dataset wjpoom/SPEC's data.zip extracted into DATA_ROOT/spec/ (a folder a subset: "
              "image2text.json, text2image.json and their images): `huggingface-cli download wjpoom/SPEC data.zip --repo-type "
              "dataset --local-dir DATA_ROOT/spec`, then `unzip DATA_ROOT/spec/data.zip -d DATA_ROOT/spec`")

    def kind_of(self, split):
        return KINDS.get(split.rsplit("_", 1)[0] if split.endswith(("_i2t", "_t2i")) else split)

    def folder(self, root: Path, subset: str) -> Path:
        return root / self.name / subset

    def present(self, root: Path, splits: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
        chosen = splits or self.splits
        absent = {}
        for subset in chosen:
            for name in ("image2text.json", "text2image.json"):
                if not (self.folder(root, subset) / name).is_file():
                    absent[str(self.folder(root, subset) / name)] = "absent: subset not scored"
        return [s for s in chosen if not any(k.startswith(str(self.folder(root, s)) + "/") for k in absent)], absent

    def lacks(self, root, splits):
        present, _ = self.present(root, splits)
        return None if present else self.missing_files(root, [self.folder(root, s) / "image2text.json" for s in splits or self.splits])

    def samples(self, root: Path, subset: str, direction: str, malformed: Malformed) -> list[tuple[int, dict]]:
        """The file's samples of `direction` (i2t, t2i), each with its index; one not of the release's format is skipped
        and named in `malformed`."""
        file = self.folder(root, subset) / ("image2text.json" if direction == "i2t" else "text2image.json")
        samples = json_records(file, "the release's list of {query, keys, label} samples")
        return list(well_formed(enumerate(samples), sample_problem, malformed, f"{file} [{subset}]", subset))

    def images(self, root):
        found = []
        for subset in self.present(root, ())[0]:
            base = self.folder(root, subset)
            found += [base / s["query"] for _, s in self.samples(root, subset, "i2t", Malformed())]
            found += [base / key for _, s in self.samples(root, subset, "t2i", Malformed()) for key in s["keys"]]
        return list(dict.fromkeys(found))

    def run(self, scorer, root, ties, splits=(), options=None):
        missing, metrics, items, malformed = Missing.of(scorer), {}, [], Malformed()
        present, absent = self.present(root, splits)
        read = {}
        for subset in present:
            try:
                read[subset] = [self.samples(root, subset, direction, malformed) for direction in ("i2t", "t2i")]
            except DataError as e:  # this subset alone: the others are scored
                absent[str(self.folder(root, subset))] = f"unusable, subset not scored: {e}"
        for subset, (i2t, t2i) in read.items():
            base = self.folder(root, subset)
            scorer.at(subset)
            kept = [(k, s) for k, s in i2t if missing.keep([base / s["query"]])]
            flat = [(base / s["query"], text) for _, s in kept for text in s["keys"]]
            scores = scorer.pairs([f[0] for f in flat], [f[1] for f in flat]) if flat else torch.zeros(0)
            rows = split_rows(scores, [len(s["keys"]) for _, s in kept])
            right = chosen(rows, [s["label"] for _, s in kept], ties)
            order = [[s["label"], *[j for j in range(len(s["keys"])) if j != s["label"]]] for _, s in kept]  # the true first
            items += choice_rows(f"{subset}_i2t", [k for k, _ in kept], [base / s["query"] for _, s in kept],
                                 [[s["keys"][j] for j in o] for (_, s), o in zip(kept, order, strict=True)],
                                 [[float(r[j]) for j in o] for r, o in zip(rows, order, strict=True)], right)
            shown = [(k, s) for k, s in t2i if missing.keep([base / key for key in s["keys"]])]
            flat = [(base / key, s["query"]) for _, s in shown for key in s["keys"]]
            scores = scorer.pairs([f[0] for f in flat], [f[1] for f in flat]) if flat else torch.zeros(0)
            picked = split_rows(scores, [len(s["keys"]) for _, s in shown])
            found = chosen(picked, [s["label"] for _, s in shown], ties)
            items += image_choice_rows(f"{subset}_t2i", [k for k, _ in shown], [[base / key for key in s["keys"]] for _, s in shown],
                                       [s["query"] for _, s in shown], [r.tolist() for r in picked],
                                       [s["label"] for _, s in shown], found)
            metrics[subset] = {"i2t": rate(right), "t2i": rate(found), "n_i2t": len(kept), "n_t2i": len(shown),
                               "n_missing": len(i2t) - len(kept) + len(t2i) - len(shown)}
            if not kept and not shown:
                absent[str(base)] = f"no image of {subset} found: not scored"
        for direction in ("i2t", "t2i"):
            if any(metrics[s][f"n_{direction}"] for s in read):
                metrics[direction] = mean_present(metrics[s][direction] for s in read)
        absent.update(malformed.named())
        return Result(metrics, missing, absent, items)


def sample_problem(sample) -> str | None:
    """Why a sample is not the release's `{query, keys, label}` (a text, a list of two texts or more, an index into
    them), or None."""
    if not isinstance(sample, dict):
        return f"a {type(sample).__name__}, not a {{query, keys, label}} sample"
    keys = sample.get("keys")
    if not isinstance(keys, list) or len(keys) < 2 or not all(isinstance(k, str) and k.strip() for k in keys):
        return f"keys is {keys!r}, not a list of two texts or more" if "keys" in sample else "no keys"
    return text_problem(sample, "query") or integer_problem(sample, "label", len(keys))


def split_rows(scores: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
    """The flat scores of items of `sizes` options each, one row an item."""
    return list(torch.split(scores, sizes)) if sizes else []


def chosen(rows: list[torch.Tensor], labels: list[int], ties: str) -> torch.Tensor:
    """Whether each row's label is the option picked under the tie rule (`protocols.picks`, row by row: items may differ in
    their number of options)."""
    if not rows:
        return torch.zeros(0, dtype=torch.bool)
    return torch.cat([protocols.picks(r[None], label, ties) for r, label in zip(rows, labels, strict=True)])
