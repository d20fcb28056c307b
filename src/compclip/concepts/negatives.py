"""`compclip negatives`: the negatives the released baselines had a masked language model fill in, written into a copy
of the training data (JSON lines) as data fields the methods read.

- `ceclip_negatives` (CE-CLIP, github.com/lezhang7/Enhance-FineGrained, `data/dataset.py` at commit 3cd1cf2,
  `TextAugment`): three texts, the caption with one adjective, one noun and one verb (spaCy's ADJ, NOUN, VERB; each
  drawn among the caption's) replaced by `<mask>` (`str.replace(word, mask, 1)`: its first occurrence, inside another
  word too), filled by `pipeline('fill-mask', model='distilroberta-base', top_k=5)`, of whose five fills the fourth
  is kept (`select_unmasked_captions`). A caption without such a word is the mask alone, filled as the release fills it.
- `llm_negatives` (SVLC-R+L, github.com/SivanDoveh/TSVLC, `src/SVLC_learning/negs_and_pos.py` at commit 051718a,
  `NegativesLLM`; DAC's `Negatives_Auto`, github.com/SivanDoveh/DAC, the same file at commit 5b8476a, is the same
  rule): the caption (its first 100 characters past 512) without punctuation; each word spaCy tags NOUN, ADP, ADJ or
  VERB (the READMEs' `--llm_neg_types` / `--auto_neg_types`) that is also a word of the caption, at each place it
  stands, masked and filled by `pipeline("fill-mask")` (transformers' default, distilroberta-base), its five fills
  less the word itself. The release draws at every read: one of the masked words (a set of them: each equally often),
  one of the places it stands, then one of that place's fills. The field keeps that structure, a list per masked
  word of a list per place of its fills, so that the methods draw as the release does (`svlc.llm_negative`): a word
  with more fills or places is not drawn more often.

The data is split into chunks of `shard_size` records, chunk c belonging to part c mod n; each chunk is written
atomically into `OUT.parts/`, so a killed run resumes at the first chunk it lacks and writes none twice. The part that
finds every chunk written joins them into OUT. A record that is no JSON object, has no caption text, holds the fill
model's mask token, is not UTF-8, or is longer than the fill model reads is left out, counted and named.
"""
from __future__ import annotations

import itertools
import json
import logging
import shutil
import string
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..errors import DataError, MissingFileError, UsageError, absent_from_hub
from ..io import FolderLock, atomic_path, write_json
from .config import CECLIP_NEGATIVES, LLM_NEGATIVES, NEGATIVE_KINDS, NegativesConfig

log = logging.getLogger("compclip.concepts")

TOP_K = 5  # fills asked of the model: the releases' pipeline top_k (CE-CLIP's explicit, SVLC's and DAC's the default)
CECLIP_KEPT = 3  # the fill CE-CLIP keeps: select_unmasked_captions' results[min(3, len(results))]
CECLIP_TAGS = ("ADJ", "NOUN", "VERB")  # mask_captions' types, in the order of its data fields
LLM_TAGS = ("NOUN", "ADP", "ADJ", "VERB")  # the READMEs' --llm_neg_types / --auto_neg_types
LLM_LONG, LLM_CUT = 512, 100  # NegativesLLM: a caption longer than 512 characters is cut to its first 100
MANIFEST = "manifest.json"
JOIN_LOCK = ".join.lock"


def parse_kinds(what: str) -> tuple[str, ...]:
    """`"ceclip,llm"` as kinds in canonical order; an unknown or empty one refused in one line."""
    kinds = {w.strip() for w in what.split(",") if w.strip()}
    if not kinds or kinds - set(NEGATIVE_KINDS):
        raise UsageError(f"--what {what!r}: choose some of {', '.join(NEGATIVE_KINDS)}")
    return tuple(k for k in NEGATIVE_KINDS if k in kinds)


def parts_folder(out: Path) -> Path:
    return out.with_name(out.name + ".parts")


def ceclip_masks(caption: str, doc, mask: str, rng) -> list[str]:
    """`TextAugment.mask_captions`' three masked texts of `caption` (its adjective, noun, verb), `doc` its spaCy parse."""
    masked = []
    for tag in CECLIP_TAGS:
        words = [token.text for token in doc if token.pos_ == tag]
        masked.append(caption.replace(rng.choice(words), mask, 1) if words else mask)
    return masked


def llm_clean(caption: str) -> str:
    """The text `NegativesLLM` parses and masks: the caption (cut past 512 characters) without punctuation."""
    if len(caption) > LLM_LONG:
        caption = caption[:LLM_CUT]
    return " ".join(caption.translate(str.maketrans("", "", string.punctuation)).split())


def llm_masks(caption: str, doc, mask: str) -> list[tuple[str, list[str]]]:
    """(word, its masked texts: one a place it stands) for each word `NegativesLLM` may mask, in the order each first
    stands; `doc` parses `llm_clean(caption)`. The release draws a word, then a place: the grouping is the draw's."""
    cut = caption[:LLM_CUT] if len(caption) > LLM_LONG else caption
    words = {token.text for token in doc if token.pos_ in LLM_TAGS} & set(cut.split())
    clean = llm_clean(caption).split()
    places: dict[str, list[str]] = {}
    for i, word in enumerate(clean):
        if word in words:
            places.setdefault(word, []).append(" ".join([*clean[:i], mask, *clean[i + 1:]]))
    return list(places.items())


def _unloadable(name: str, error: Exception) -> Exception:
    """The one line for a fill model that does not load: a Hub name the cache lacks says the cache looked in and the
    command that runs on a copy instead (offline, as `compclip eval` says of weights); a folder, why it is no model."""
    if name.startswith(("/", ".", "~")) or name.count("/") > 1:
        if not Path(name).expanduser().exists():
            return MissingFileError(f"--fill-model {name}: no fill-mask model loads from it (no such folder)")
    elif not Path(name).exists() and isinstance(error, OSError):
        copy = (f"`compclip negatives DATA --out OUT --fill-model FOLDER`, FOLDER a copy of it "
                f"(`huggingface-cli download {name} --local-dir FOLDER` where the Hub answers)")
        return absent_from_hub(f"--fill-model {name}", "the fill-mask model", error, copy)
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return MissingFileError(f"--fill-model {name}: no fill-mask model loads from it ({first})")


class Filler:
    """The fill-mask pipeline on the model `name`, read once; `fills(texts)` -> each text's fills, best first."""

    def __init__(self, name: str, batch_size: int):
        import torch
        from transformers import pipeline

        try:
            self.pipe = pipeline("fill-mask", model=name, tokenizer=name, top_k=TOP_K, device=0 if torch.cuda.is_available() else -1)
        except (OSError, ValueError, KeyError) as e:
            raise _unloadable(name, e) from None
        self.mask = self.pipe.tokenizer.mask_token
        if not self.mask:
            raise UsageError(f"--fill-model {name}: its tokenizer has no mask token: not a masked language model")
        self.longest, self.batch_size = self.pipe.tokenizer.model_max_length, batch_size

    def too_long(self, text: str) -> bool:
        return len(self.pipe.tokenizer(text)["input_ids"]) > self.longest

    def fills(self, texts: list[str]) -> list[list[dict[str, Any]]]:
        if not texts:
            return []
        found = self.pipe(texts, batch_size=self.batch_size)
        return [found] if len(texts) == 1 else found  # the pipeline gives one text's fills unwrapped


def _refusal(value: Any, caption_key: str, mask: str) -> str | None:
    """Why a record gets no negatives (left out of OUT), or None."""
    from ..data.readers import undecodable

    if isinstance(value, json.JSONDecodeError):
        return "not JSON"
    if not isinstance(value, dict):
        return "not a JSON object"
    caption = value.get(caption_key)
    if not isinstance(caption, str) or not caption.strip():
        return f"no caption text in field {caption_key!r}"
    if undecodable(caption):
        return "the caption is not UTF-8"
    if mask in caption:
        return f"the caption holds the fill model's mask token {mask!r}"
    return None


def fill_chunk(records: list[tuple[str, Any]], cfg: NegativesConfig, kinds: tuple[str, ...], nlp, filler: Filler
               ) -> tuple[list[dict[str, Any]], dict[str, list]]:
    """The chunk's records with their negative fields, and its skips: {reason: [count, first record's place]}."""
    from ..text import caption_rng

    skips: dict[str, list] = {}

    def skip(reason: str, where: str) -> None:
        skips.setdefault(reason, [0, where])[0] += 1

    valid = []
    for where, value in records:
        why = _refusal(value, cfg.caption_key, filler.mask)
        if why:
            skip(why, where)
        else:
            valid.append((where, value, value[cfg.caption_key].strip()))
    captions = [c for _, _, c in valid]
    ceclip_docs = nlp.pipe(captions) if "ceclip" in kinds else itertools.repeat(None)
    llm_docs = nlp.pipe([llm_clean(c) for c in captions]) if "llm" in kinds else itertools.repeat(None)
    jobs = []  # (record, masked texts per kind)
    for (where, value, caption), ceclip_doc, llm_doc in zip(valid, ceclip_docs, llm_docs, strict=False):
        masked: dict[str, Any] = {}
        if ceclip_doc is not None:
            masked["ceclip"] = ceclip_masks(caption, ceclip_doc, filler.mask, caption_rng(cfg.seed, "ceclip-negatives", caption))
        if llm_doc is not None:
            masked["llm"] = llm_masks(caption, llm_doc, filler.mask)
        if any(filler.too_long(t) for t in _texts(masked)):
            skip(f"longer than the fill model reads ({filler.longest} tokens)", where)
            continue
        jobs.append((value, masked))
    fills = iter(filler.fills([t for _, masked in jobs for t in _texts(masked)]))
    out = []
    for value, masked in jobs:
        record = dict(value)
        if "ceclip" in masked:
            record[CECLIP_NEGATIVES] = [kept(next(fills)) for _ in masked["ceclip"]]
        if "llm" in masked:
            record[LLM_NEGATIVES] = [[llm_fills(next(fills), word) for _ in texts] for word, texts in masked["llm"]]
        out.append(record)
    return out, skips


def _texts(masked: dict[str, Any]) -> list[str]:
    """A record's masked texts in the order they are filled: CE-CLIP's three, then each of SVLC's, word by word."""
    return [*masked.get("ceclip", ()), *(text for _, texts in masked.get("llm", ()) for text in texts)]


def llm_fills(fills: list[dict[str, Any]], word: str) -> list[str]:
    """`NegativesLLM`'s fills of one place of `word`: the sentences of those that are not the word itself."""
    return [f["sequence"] for f in fills if f["token_str"].strip(" ") != word]


def kept(fills: list[dict[str, Any]]) -> str:
    """CE-CLIP's fill: the fourth best (fewer given: the last)."""
    return fills[min(CECLIP_KEPT, len(fills) - 1)]["sequence"]


def _chunks(records: Iterable[tuple[str, Any]], size: int) -> Iterator[tuple[int, list[tuple[str, Any]]]]:
    chunk: list[tuple[str, Any]] = []
    number = 0
    for record in records:
        chunk.append(record)
        if len(chunk) == size:
            yield number, chunk
            number, chunk = number + 1, []
    if chunk:
        yield number, chunk


def _chunk_path(folder: Path, number: int) -> Path:
    return folder / f"chunk-{number:05d}.jsonl"


def _skips_path(folder: Path, number: int) -> Path:
    return folder / f"chunk-{number:05d}.skips.json"


def _start(data: Path, out: Path, cfg: NegativesConfig, kinds: tuple[str, ...]) -> Path:
    """The parts folder, its manifest written, or checked to be this run's: a resumed run must make the same fields."""
    folder = parts_folder(out)
    config = {"data": str(data.resolve()), **asdict(cfg), "what": list(kinds)}
    del config["part"], config["batch_size"]  # neither changes a record
    manifest = folder / MANIFEST
    if manifest.is_file():
        try:
            found = json.loads(manifest.read_text(encoding="utf-8"))["config"]
        except (ValueError, KeyError, TypeError) as e:
            raise DataError(f"{manifest}: a damaged manifest ({type(e).__name__}: {e}); remove {folder} and run again") from None
        if found != config:
            raise UsageError(f"{folder} holds negatives made with {found}, not {config}: choose another --out, or remove {folder}")
    else:
        write_json(manifest, {"config": config})
    return folder


def build_negatives(data: str | Path, out: str | Path, cfg: NegativesConfig = NegativesConfig(), part: tuple[int, int] = (0, 1)
                    ) -> dict[str, Any]:
    """Fill in the negatives of `cfg.what` for every chunk of part `part` = (i, n) of `data` (JSON lines) not yet written,
    then, once every chunk is, join them into `out`. The counts: chunks written and already there, records, skips
    ({reason: [count, first record]}, this run's) and `complete` (whether `out` is written)."""
    from ..data.readers import json_lines
    from .pipeline import load_nlp

    data, out, kinds = Path(data), Path(out), parse_kinds(cfg.what)
    if not data.is_file():
        raise MissingFileError(f"{data}: no such file")
    if data.suffix.lower() != ".jsonl":
        raise UsageError(f"{data}: negatives are written into JSON lines records (.jsonl), which carry a method's data fields")
    if cfg.shard_size < 1 or cfg.batch_size < 1:
        raise UsageError(f"--shard-size and --batch-size must be at least 1, not {cfg.shard_size} and {cfg.batch_size}")
    _check_caption_key(data, cfg.caption_key)
    if out.exists() and not parts_folder(out).exists():
        raise UsageError(f"--out {out} exists: choose another, or remove it to write it again")
    filler, nlp = Filler(cfg.fill_model, cfg.batch_size), load_nlp()  # first: a model that does not load leaves nothing behind
    folder = _start(data, out, cfg, kinds)
    i, n = part
    stats: dict[str, Any] = {"chunks_written": 0, "chunks_there": 0, "records": 0, "skips": {}}
    with FolderLock(folder / f".part-{i}-of-{n}.lock", f"another compclip negatives run of part {i}/{n}"):
        chunks = 0
        for number, records in _chunks(json_lines(data), cfg.shard_size):
            chunks = number + 1
            if number % n != i:
                continue
            if _chunk_path(folder, number).is_file():
                stats["chunks_there"] += 1
                continue
            written, skips = fill_chunk(records, cfg, kinds, nlp, filler)
            _write_chunk(folder, number, written, skips)
            stats["chunks_written"] += 1
            stats["records"] += len(written)
            _add_skips(stats["skips"], skips)
    stats["missing"] = [c for c in range(chunks) if not _chunk_path(folder, c).is_file()]
    stats["complete"] = False
    if not stats["missing"]:
        stats["complete"], stats["skips_in_all"] = _join(folder, out, chunks)
    return stats


def _check_caption_key(data: Path, key: str) -> None:
    """DATA's first record holds the caption key, as training's reader judges it: a wrong --caption-key would otherwise
    skip every record and write an OUT of none."""
    from ..data.readers import json_lines

    first = next((value for _, value in json_lines(data) if isinstance(value, dict)), None)
    if first is not None and key not in first:
        raise DataError(f"{data}: no field {key!r} in its first record (fields: {list(first)}); set --caption-key")


def _write_chunk(folder: Path, number: int, records: list[dict[str, Any]], skips: dict[str, list]) -> None:
    """A chunk's skips, then its records: each file atomic, the records' file the mark that the chunk is done."""
    write_json(_skips_path(folder, number), skips)
    # another field's bytes that are not UTF-8 are copied as they were read (surrogate-escaped)
    with atomic_path(_chunk_path(folder, number)) as tmp, open(tmp, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def _join(folder: Path, out: Path, chunks: int) -> tuple[bool, dict[str, list]]:
    """Write OUT from every chunk in order, atomically, and remove the parts folder (under a lock: parts may end together).
    (whether OUT is written, every chunk's skips: {reason: [count, first record]})."""
    every: dict[str, list] = {}
    with FolderLock(folder / JOIN_LOCK, "another part joining the chunks", wait=True):
        if not (folder / MANIFEST).is_file():  # another part joined them while this one waited
            return out.is_file(), every
        with atomic_path(out) as tmp, open(tmp, "wb") as sink:
            for number in range(chunks):
                with open(_chunk_path(folder, number), "rb") as source:
                    shutil.copyfileobj(source, sink)
                _add_skips(every, _read_skips(_skips_path(folder, number)))
        shutil.rmtree(folder)
    return True, every


def _add_skips(total: dict[str, list], more: dict[str, list]) -> None:
    """Add `more`'s counts to `total`'s ({reason: [count, first record]}), the first record kept."""
    for reason, (count, where) in more.items():
        total.setdefault(reason, [0, where])[0] += count


def _read_skips(path: Path) -> dict[str, list]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: a damaged chunk record ({type(e).__name__}: {e}); remove it and its chunk and run again") from None
