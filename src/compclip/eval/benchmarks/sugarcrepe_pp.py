"""SugarCrepe++ (Dumpala et al., 2024): P1, a paraphrase P2, and a negative N; image-to-text and text-only.

Layout: the 5 files of the scpp repository's `data/` in `sugarcrepe_pp/` (`compclip data download
sugarcrepe_pp`), images as SugarCrepe's. Rule: scpp's `VLMs/test_Variants_CLIP.py` (`correct_full`, `correct_text`):
ITT correct when s(I,P1) > s(I,N) and s(I,P2) > s(I,N); TOT when s(P1,P2) > s(P1,N) and s(P1,P2) > s(P2,N); a tie wrong.
"""
from __future__ import annotations

import torch

from .. import protocols
from ..base import NOT_APPLICABLE, json_records, rate, register, well_formed
from ..download import Asset
from ..items import choice_rows
from .sugarcrepe import ITEMS as SUGARCREPE_ITEMS
from .sugarcrepe import SPLITS as SUGARCREPE_SPLITS
from .sugarcrepe import SugarCrepe, coco_image

SPLITS = tuple(s for s in SUGARCREPE_SPLITS if not s.startswith("add_"))  # SugarCrepe++ has no add splits
FAMILIES = {"replace": SPLITS[:3], "swap": SPLITS[3:]}
ITEMS = {split: SUGARCREPE_ITEMS[split] for split in SPLITS}
SOURCE = "https://raw.githubusercontent.com/Sri-Harsha/scpp/main/data"
# each split file of Sri-Harsha/scpp's data/ (main): its SHA-256 (`compclip data download` checks it, `report --paper` holds a
# result's files against it) and its records, SugarCrepe's of the same split
SHA256 = {
    "replace_att": "6826413592894754eeca02aeebbcbbc8b95a7456998abcc714e71c033ce6fe87",
    "replace_obj": "5c6dc499ec8f511a8aa4ec1b7b5eb0eca90317488abe36ec39573355e2d361ab",
    "replace_rel": "040fb95d3f0619bf515db60879e99709a87a5e9b4f524ec3403b127243480fd4",
    "swap_att": "450d0fd9fcad3e6f44950dc634e7f901ab1c6d9c60a569ade5ae8ffb3d203ad8",
    "swap_obj": "5f33cae824de431a7ecd3c5de6301f689815f9497aa36d96b154bbaf117b201b",
}


@register
class SugarCrepePP(SugarCrepe):
    """The annotation files and images are laid out as SugarCrepe's; each file is a list of records."""

    name = "sugarcrepe_pp"
    verdict = "ITT accuracy"  # an item's `correct`; its TOT verdict is the `tot` column
    splits = SPLITS
    families = FAMILIES
    averaged = (("itt", "_itt"), ("tot", "_tot"))
    fields = ("filename", "caption", "caption2", "negative_caption")  # each record's texts (scpp's test_Variants_CLIP.py)
    spectrum = ""  # not one of vl_compo's twelve
    layout = ("SugarCrepe++: the 5 split files of github.com/Sri-Harsha/scpp data/ in DATA_ROOT/sugarcrepe_pp/ "
              "(`compclip data download sugarcrepe_pp`), COCO val2017 images in DATA_ROOT/coco/val2017/")
    assets = tuple(Asset(f"{SOURCE}/{split}.json", f"sugarcrepe_pp/{split}.json", sha) for split, sha in SHA256.items())
    release_sha256, release_items = SHA256, ITEMS
    columns = (("SC++ replace ITT", ("replace_itt",)), ("SC++ replace TOT", ("replace_tot",)), ("SC++ swap ITT", ("swap_itt",)),
               ("SC++ swap TOT", ("swap_tot",)), ("SC++ ITT", ("overall_itt",)), ("SC++ TOT", ("overall_tot",)))

    def records(self, root, split, malformed):
        file = self.file(root, split)
        found = json_records(file, "scpp's list of records")
        return [{"id": k, **record} for k, record in well_formed(enumerate(found), self.record_problem, malformed, str(file), split)]

    def score(self, scorer, root, split, records, missing, ties):
        """A split's ITT over the records whose image is there and TOT over every record, with one row per ITT item."""
        p1, p2, n = ([r[k] for r in records] for k in ("caption", "caption2", "negative_caption"))
        p1_p2 = scorer.text_pairs(p1, p2)
        tot = None if p1_p2 is None else protocols.tot(p1_p2, scorer.text_pairs(p1, n), scorer.text_pairs(p2, n), ties)
        kept = [i for i, r in enumerate(records) if missing.keep([coco_image(root, r["filename"])])]
        rows = []
        if kept:
            images = [coco_image(root, records[i]["filename"]) for i in kept]
            texts = [(p1[i], p2[i], n[i]) for i in kept]
            scores = torch.stack([scorer.pairs(images, [t[k] for t in texts]) for k in range(3)], dim=1)
            itt = protocols.itt(scores[:, 0], scores[:, 1], scores[:, 2], ties)
            rows = choice_rows(split, [records[i]["id"] for i in kept], images, texts, scores, itt, n_true=2)
            for row, i in zip(rows, kept, strict=True):  # the text-only verdict beside it (None: no text-to-text score)
                row["tot"] = None if tot is None else bool(tot[i])
        return {
            "itt": rate(itt) if kept else float("nan"),
            "tot": NOT_APPLICABLE if tot is None else rate(tot),
            "n": len(records),
            "n_itt": len(kept),
        }, rows
