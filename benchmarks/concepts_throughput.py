"""Concept extraction throughput on the 25,014 real COCO val2017 captions.

The naive loop (`for c in captions: nlp(c)`, the full pipeline, as CLIC does per step) and
compclip's engine (distinct captions, `nlp.pipe`, only the needed components, worker
processes, Parquet cache) on the same machine in one run; both must give the same noun
phrases. Then the engine again on its warm cache.
Target, 2 cores, cold cache: >= 1,500 captions/s and >= 3x the naive loop.

Run: .venv/bin/python benchmarks/concepts_throughput.py [--workers 2]
"""
import argparse
import json
import tempfile
import time
from pathlib import Path

import spacy

from compclip.concepts import build_store, extract, iter_captions
from compclip.concepts.parse import base_chunks, noun_phrases
from compclip.concepts.pipeline import MODELS

COCO = Path(__file__).resolve().parents[2] / "shared" / "data" / "coco" / "captions_val2017.json"


def naive(captions):
    """What per-caption code does: the full default pipeline, one call per caption."""
    nlp = next(spacy.load(m) for m in MODELS if spacy.util.is_package(m))
    start = time.perf_counter()
    phrases = [noun_phrases(doc, base_chunks(doc)) for doc in (nlp(c) for c in captions)]
    return phrases, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--coco", type=Path, default=COCO)
    args = parser.parse_args()
    captions = list(iter_captions(args.coco))
    print(f"{len(captions)} captions ({len(set(captions))} distinct), {args.workers} workers")

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        store, _ = build_store(captions, tmp, "noun_phrases", workers=args.workers)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        build_store(captions, tmp, "noun_phrases", workers=args.workers)
        warm = time.perf_counter() - start
        engine = [store[c]["noun_phrases"] for c in captions]

    reference, naive_s = naive(captions)
    assert engine == reference, "engine and naive loop disagree on noun phrases"
    assert engine == [r["noun_phrases"] for r in extract(captions[:500])] + engine[500:]

    rate = lambda s: len(captions) / s  # noqa: E731
    print(f"naive loop      {naive_s:7.2f} s  {rate(naive_s):9.0f} captions/s")
    print(f"engine, cold    {cold:7.2f} s  {rate(cold):9.0f} captions/s  {naive_s / cold:5.1f}x naive")
    print(f"engine, warm    {warm:7.2f} s  {rate(warm):9.0f} captions/s  {naive_s / warm:5.1f}x naive")
    print(json.dumps({"naive": rate(naive_s), "cold": rate(cold), "warm": rate(warm), "ratio_cold": naive_s / cold}))


if __name__ == "__main__":
    main()
