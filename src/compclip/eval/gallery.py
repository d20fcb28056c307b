"""`compclip report --html`: one self-contained page of what each model got wrong, for a person to look at.

The report's figures first (embedded in the page, as the thumbnails are); per benchmark and split, each model's accuracy
with its 95 % interval and item count; then every item a model got wrong (up to `SHOWN` a model and split), the benchmarks'
items before retrieval's misses (hundreds a model, each telling less of what a model confuses): its image (a thumbnail
embedded in the page), the true caption, the false caption the model preferred (for a caption that retrieved another
image, that image's captions), both scores, and what the false caption changed: the words that differ from the caption
it was made from (`source_caption`), and their kind
(attribute, object, relation, spatial, counting, negation): the benchmark's own where its authors sort its splits so
(SugarCrepe's and SugarCrepe++'s `_att`, `_obj`, `_rel`, VL-CheckList's folders, ARO's VG-Relation and VG-Attribution,
What'sUp's prepositions, VALSE's instruments, SPEC's subsets, CREPE's negative types, EqBen's Kubric sets:
`Benchmark.kind_of`), "retrieval" for a retrieval's miss, otherwise from spaCy's parse of the true caption (an adjective,
a noun, a preposition or verb).
Filters by split, by kind and word, by model, and to the items two models disagree on; the page's address can set them
(`report.html#split=swap_att&kind=attribute`), so a view can be shared. No server, no script from elsewhere.
"""
from __future__ import annotations

import base64
import html
import io
import logging
import os
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd

from ..io import atomic_path
from ..stats import wilson
from .base import REGISTRY
from .items import IDENTITY, identified

log = logging.getLogger("compclip.eval.gallery")

SHOWN = 500  # wrong items shown per model and split; the totals count them all
THUMBNAIL = 128
KINDS = {"ADJ": "attribute", "NOUN": "object", "PROPN": "object", "ADP": "relation", "VERB": "relation"}
_WORD = re.compile(r"[\w']+")


def changed_words(true: str, false: str) -> list[str]:
    """The words of `true` that `false` changed: where both hold the same words in another order (a swap), those whose
    place differs; otherwise those `false` lacks (a replacement), or failing that the words it added."""
    t, f = (_WORD.findall(x.lower()) for x in (true, false))
    if Counter(t) == Counter(f) and len(t) == len(f):
        return list(dict.fromkeys(a for a, b in zip(t, f, strict=True) if a != b))
    lost = [w for w in dict.fromkeys(t) if w not in f]
    return lost or [w for w in dict.fromkeys(f) if w not in t]


def source_caption(row: Any) -> str:
    """The caption an item's false ones were made from, which its changed words are read against: a choice's first
    option (`texts`, the true ones first). It is the true caption except where an item has two: SugarCrepe++ offers its
    caption, a paraphrase of it and the negative made from the caption, and `true` is the weaker of the two true ones,
    often the paraphrase, whose words differ from the negative's everywhere."""
    texts = getattr(row, "texts", None)
    return str(texts[0]) if texts is not None and not isinstance(texts, float) and len(texts) else str(row.true)


def retrieved_captions(items: pd.DataFrame) -> dict[tuple[str, str, str], list[str]]:
    """Each retrieval image's captions, by benchmark, split and image: a caption query's row names its own image and
    its caption (`true`), so all of them together say what an image another caption retrieved shows."""
    if "direction" not in items:
        return {}
    queries = items[items["direction"] == "text→image"]
    captions: dict[tuple[str, str, str], list[str]] = {}
    for key, caption in zip(zip(queries["benchmark"], queries["split"].astype(str), queries["image"], strict=True),
                            queries["true"].astype(str), strict=True):
        mine = captions.setdefault(key, [])
        if caption not in mine:  # every model's rows name the same captions
            mine.append(caption)
    return captions


def is_query(direction: Any) -> bool:
    """Whether a row's `direction` names a retrieval query's (other benchmarks' rows have none)."""
    return isinstance(direction, str) and bool(direction)


def is_retrieval(rows: pd.DataFrame) -> bool:
    """Whether a split's rows are retrieval's queries."""
    return "direction" in rows and bool(rows["direction"].map(is_query).any())


def figure(path: Path) -> str:
    """A report figure as an image in the page, its PNG's bytes in a data URL (the page stays one file)."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<figure><img src="data:image/png;base64,{data}" alt="{_e(path.stem)}"><figcaption>{_e(path.stem)}</figcaption></figure>'


def word_kinds(captions: list[str]) -> dict[str, dict[str, str]]:
    """Each caption's words with their kind (`KINDS`) from spaCy's tags, parsed once per distinct caption (none: spaCy
    is not even loaded)."""
    if not captions:
        return {}
    from ..concepts import extract

    kinds = {}
    for record in extract(list(dict.fromkeys(captions)), "pos"):
        kinds[record["caption"]] = {text.lower(): KINDS[tag] for text, _, _, tag in record["pos"] if tag in KINDS}
    return kinds


def declared_kind(benchmark: str, split: str) -> str | None:
    """The kind the benchmark gives the split's changes (`Benchmark.kind_of`), or None. `benchmark` is a result file's
    name: the benchmark's, then `-SPLIT` where one split was run (`sugarcrepe-swap_att`)."""
    name = benchmark.partition("-")[0]
    return REGISTRY[name].kind_of(split) if name in REGISTRY else None


def thumbnail(image: str) -> str | None:
    """A data URL of the image file, at most THUMBNAIL pixels a side, or None where it is no readable file, or one past
    Pillow's decompression-bomb limit (`Image.MAX_IMAGE_PIXELS`: decoding it would take gigabytes), shown as missing."""
    from PIL import Image

    try:
        with Image.open(image) as img:
            if Image.MAX_IMAGE_PIXELS and img.width * img.height > Image.MAX_IMAGE_PIXELS:
                return None
            scale = min(1.0, THUMBNAIL / max(img.size, default=1))
            # a JPEG decodes at the smallest of its scales (1/2, 1/4, 1/8) that still covers the thumbnail's own size
            img.draft("RGB", (max(1, round(img.width * scale)), max(1, round(img.height * scale))))
            img = img.convert("RGB")
            img.thumbnail((THUMBNAIL, THUMBNAIL))
            buf = io.BytesIO()
            img.save(buf, "JPEG", quality=75)
    except (OSError, ValueError, Image.DecompressionBombError):
        return None
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def write_gallery(items: pd.DataFrame, out: Path, figures: list[Path] | tuple[Path, ...] = ()) -> Path:
    """The page, from every model's items (`load_items`, models named as the report names them) and the report's
    `figures` (PNG files), shown above the items."""
    models = list(dict.fromkeys(items["model"]))
    # items paired as `compare` pairs them: by what each is, and which copy of an item a split repeats
    items = identified(items, ["model", "benchmark", "split", "item"])
    verdicts = items.assign(correct=items["correct"].astype(float)).pivot_table(index=IDENTITY, columns="model", values="correct",
                                                                               aggfunc="first")
    disagree = set(verdicts.index[verdicts.max(axis=1) != verdicts.min(axis=1)]) if len(models) > 1 else set()  # column-wise
    wrong = items[~items["correct"].astype(bool)]
    wrong = wrong.groupby(["model", "benchmark", "split"], group_keys=False).head(SHOWN)
    parts = list(zip(wrong["benchmark"], wrong["split"].astype(str), strict=True))
    declared = {key: declared_kind(*key) for key in set(parts)}
    # a retrieval's query: its wrong answer is another image or another image's caption, no word of it a swap
    queries = [is_query(d) for d in (wrong["direction"] if "direction" in wrong else [None] * len(wrong))]
    order = sorted(range(len(wrong)), key=queries.__getitem__)  # the benchmarks' items first, retrieval's misses last
    wrong, queries = wrong.iloc[order], [queries[k] for k in order]
    parts = [parts[k] for k in order]
    retrieved = retrieved_captions(items)
    undeclared = [declared[key] is None and not query for key, query in zip(parts, queries, strict=True)]
    sources = [source_caption(row) for row in wrong.itertuples(index=False)]
    kinds = word_kinds([s for s, u in zip(sources, undeclared, strict=True) if u])  # spaCy only where the benchmark says nothing
    # each shown image's data URL (in the page once, as a style rule its cards name: models share images), made on
    # every core: Pillow lets go of Python's lock while it decodes and resizes
    seconds = [i for i in wrong.get("image_2", []) if isinstance(i, str) and i]
    shown = list(dict.fromkeys([*wrong["image"], *seconds]))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # a job's, not its node's
    with ThreadPoolExecutor(max_workers=cores) as pool:
        thumbs = dict(zip(shown, pool.map(thumbnail, shown), strict=True))
    names = {image: f"t{k}" for k, image in enumerate(shown)}
    gone = not_found([image for image in shown if not thumbs[image]], out, len(shown))
    totals, cards = [], []
    splits_first = sorted(items.groupby(["benchmark", "split"], sort=True), key=lambda part: is_retrieval(part[1]))  # as the cards
    for (bench, split), group in splits_first:
        for model in models:
            mine = group[group["model"] == model]
            if len(mine):
                right = int(mine["correct"].astype(bool).sum())
                acc, (low, high) = 100 * right / len(mine), (100 * v for v in wilson(right, len(mine)))
                totals.append(f"<tr><td>{_e(bench)}</td><td>{_e(split or '—')}</td><td>{_e(model)}</td><td>{len(mine):,}</td>"
                              f"<td>{acc:.1f}</td><td>[{low:.1f}, {high:.1f}]</td></tr>")
    for row, retrieval, source in zip(wrong.itertuples(index=False), queries, sources, strict=True):
        words = [] if retrieval else changed_words(source, str(row.false))
        found = kinds.get(source, {})
        kind = "retrieval" if retrieval else declared[row.benchmark, str(row.split)] or next((found[w] for w in words if w in found),
                                                                                              "other")
        second = getattr(row, "image_2", None)  # Winoground's other image, the image a caption retrieved instead of its own
        pictures = []
        for image, title in ((row.image, "its image"), *([(second, "the other image")] if isinstance(second, str) and second else [])):
            name = names[image] if thumbs[image] else None
            pictures.append(f'<div class="thumb {name}" role="img" title="{title}"></div>' if name else
                            f'<div class="noimg">{"not found: " if image in gone else ""}{_e(image)}</div>')
        picture = "".join(pictures)
        false = str(row.false)
        if retrieval and row.direction == "text→image":  # `false` names the image retrieved: say what it shows
            false = " / ".join(retrieved.get((row.benchmark, str(row.split), second), [false]))
        made_from = f'<div class="source">made from: {_e(source)}</div>' if source != str(row.true) else ""
        rank = getattr(row, "rank", None)  # 0: its own retrieved first
        said = (f"retrieval {row.direction}" + ("" if pd.isna(rank) else f", its own ranked {int(rank) + 1}") if retrieval else
                f"{kind}: {', '.join(words) or '—'}")
        key = (row.benchmark, row.split, row.item, row.identity, row.copy)
        cards.append(
            f'<div class="card" data-model="{_e(row.model)}" data-split="{_e(row.benchmark)}/{_e(row.split)}" data-kind="{kind}" '
            f'data-words="{_e(" ".join(words))}" data-disagree="{int(key in disagree)}">{picture}<div class="text">'
            f'<div class="meta">{_e(row.model)} · {_e(row.benchmark)}/{_e(row.split or "—")} · item {_e(row.item)} · {_e(said)}</div>'
            f'<div class="true">✓ {_e(row.true)} <span class="score">{row.score_true:.4f}</span></div>'
            f'{made_from}<div class="false">✗ {_e(false)} <span class="score">{row.score_false:.4f}</span></div></div></div>')
    splits = sorted({f"{b}/{s}" for b, s in zip(wrong["benchmark"], wrong["split"], strict=True)})
    styles = "\n".join(f'.{names[image]} {{ background-image: url("{src}"); }}' for image, src in thumbs.items() if src)
    page = PAGE.format(styles=styles, figures="\n".join(figure(f) for f in figures),
        models=_e(", ".join(models)), totals="\n".join(totals), cards="\n".join(cards), shown=SHOWN,
        split_options="".join(f'<option value="{_e(s)}">{_e(s)}</option>' for s in splits),
        model_options="".join(f'<option value="{_e(m)}">{_e(m)}</option>' for m in models),
        disagree_hidden="" if len(models) > 1 else " hidden", count=len(cards))
    with atomic_path(out) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return out


def not_found(unshown: list[str], page: Path, shown: int) -> set[str]:
    """The images without a thumbnail whose file is not there (not those there but undecodable), said in one warning
    line with their count: a page whose cards show file names instead of images says so where it is written."""
    gone = {image for image in unshown if not Path(image.partition("::")[0]).is_file()}
    if gone:
        log.warning("%s: %d of the %d images shown not found, e.g. %s: their cards say so; where the data has moved since "
                    "`compclip eval`, give `compclip report --data-root` where it lies now", page, len(gone), shown, min(gone))
    return gone


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>compclip: what the models got wrong</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; margin-bottom: 1.5em; }} td, th {{ border: 1px solid #ccc; padding: 2px 8px; text-align: left; }}
.filters {{ position: sticky; top: 0; background: #fff; padding: 0.5em 0; border-bottom: 1px solid #ccc; }}
.card {{ display: flex; gap: 0.8em; border-bottom: 1px solid #eee; padding: 0.4em 0; }}
.thumb {{ width: 128px; height: 128px; flex: none; background: no-repeat center / contain; }}
.noimg {{ width: 128px; flex: none; font-size: 0.7em; color: #888; word-break: break-all; }}
{styles}
.meta {{ font-size: 0.8em; color: #666; }} .true {{ color: #175e17; }} .false {{ color: #8a1c1c; }}
.score {{ font-family: monospace; color: #555; }} [hidden] {{ display: none !important; }} .source {{ color: #555; }}
.figures {{ display: flex; flex-wrap: wrap; gap: 1em; }} figure {{ margin: 0; max-width: 48%; }} figure img {{ max-width: 100%; }}
figcaption {{ font-size: 0.8em; color: #666; }}
</style></head>
<body>
<h1>What the models got wrong</h1>
<p>Models: {models}. Accuracy in % with its 95 % Wilson interval over the items; below, each item a model got wrong
(at most {shown} a model and split), the false caption it scored above the true one, and the words that caption changed;
the benchmarks' items first, retrieval's misses last.</p>
<div class="figures">
{figures}
</div>
<table><thead><tr><th>benchmark</th><th>split</th><th>model</th><th>items</th><th>accuracy</th><th>95 % interval</th></tr></thead>
<tbody>
{totals}
</tbody></table>
<div class="filters">
<label>split <select id="split"><option value="">all</option>{split_options}</select></label>
<label>kind <select id="kind"><option value="">all</option><option>attribute</option><option>object</option>
<option>relation</option><option>spatial</option><option>counting</option><option>negation</option><option>retrieval</option>
<option>other</option></select></label>
<label>word <input id="word" size="10"></label>
<label>model <select id="model"><option value="">all</option>{model_options}</select></label>
<label{disagree_hidden}><input type="checkbox" id="disagree"> only where the models disagree</label>
<span id="shown">{count}</span> of {count} shown
</div>
<div id="cards">
{cards}
</div>
<script>
"use strict";
const fields = ["split", "kind", "word", "model", "disagree"];
function value(name) {{
  const el = document.getElementById(name);
  return el.type === "checkbox" ? (el.checked ? "1" : "") : el.value.trim();
}}
function apply() {{
  const want = Object.fromEntries(fields.map(f => [f, value(f)]));
  let shown = 0;
  for (const card of document.querySelectorAll(".card")) {{
    const d = card.dataset;
    const ok = (!want.split || d.split === want.split) && (!want.kind || d.kind === want.kind)
      && (!want.word || d.words.split(" ").includes(want.word.toLowerCase())) && (!want.model || d.model === want.model)
      && (!want.disagree || d.disagree === "1");
    card.hidden = !ok;
    shown += ok ? 1 : 0;
  }}
  document.getElementById("shown").textContent = String(shown);
  const hash = fields.filter(f => want[f]).map(f => f + "=" + encodeURIComponent(want[f])).join("&");
  history.replaceState(null, "", hash ? "#" + hash : location.pathname);
}}
function fromHash() {{
  for (const part of location.hash.slice(1).split("&").filter(Boolean)) {{
    const [key, raw] = part.split("=");
    const el = document.getElementById(key);
    if (!el) continue;
    const v = decodeURIComponent(raw || "");
    if (el.type === "checkbox") el.checked = v === "1"; else el.value = v;
  }}
}}
for (const f of fields) document.getElementById(f).addEventListener("input", apply);
fromHash();
apply();
</script>
</body></html>
"""
