"""The share of spaCy's noun phrases that C2LIP's span mode finds in the caption as the model tokenizes it.

Over the shipped Flickr8k captions (5,000): the CLIP BPE (`compclip-tiny-clip`) and a tokenizer that cleans the caption
as SigLIP's do (`compclip-tiny-siglip-hf`: open_clip's `HFTokenizer` with `clean="canonicalize"`, lower case and
punctuation removed; its small WordPiece vocabulary spells unknown words letter by letter, so long captions run past its
64 tokens). Each tokenizer is measured at its model's context, where phrases cut off are lost by design, and at a
context of 512, where every phrase fits and every one should be found. Prints each share and up to `--examples`
phrases not found at 512.

Run: .venv/bin/python benchmarks/span_alignment.py [--captions PATH] [--examples 5]
"""
import argparse
import csv
from pathlib import Path

from compclip.concepts import extract
from compclip.methods.c2lip import concept_token_spans
from compclip.models import load_model

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--captions", type=Path, default=SHARED / "flickr8k_1k" / "captions.csv", help="an image,caption CSV")
    parser.add_argument("--examples", type=int, default=5)
    args = parser.parse_args()
    with open(args.captions, newline="", encoding="utf-8") as f:
        captions = [r["caption"] for r in csv.DictReader(f)]
    records = extract(captions, "noun-phrases")
    print(f"{len(captions)} captions, {sum(len(r['noun_phrases']) for r in records)} noun phrases")
    for name in ("compclip-tiny-clip", "compclip-tiny-siglip-hf"):
        tokenizer = load_model(name)[2]
        for context in (tokenizer.context_length, 512):
            found = total = 0
            lost = []
            for caption, record, tokens in zip(captions, records, tokenizer(captions, context_length=context).tolist(), strict=True):
                spans = concept_token_spans(tokenizer, caption, record["noun_phrases"], tokens)
                total += len(spans)
                found += sum(s is not None for s in spans)
                lost += [(p[0], caption) for p, s in zip(record["noun_phrases"], spans, strict=True) if s is None]
            print(f"{name:26s} context {context:3d}: {found:6d} of {total} phrases found ({100 * found / total:.2f} %)")
        for phrase, caption in lost[: args.examples]:
            print(f"    not found: {phrase!r} in {caption!r}")

if __name__ == "__main__":
    main()
