"""`ConceptConfig`: every option of `compclip concepts`, declared once (its flags are generated from it). Nothing
heavy is imported here, so that the command line's help stays instant."""
from __future__ import annotations

from dataclasses import dataclass

from ..options import option

SHARD_SIZE = 20_000  # records per store shard: the unit a killed run resumes from


@dataclass(frozen=True)
class ConceptConfig:
    what: str = option("noun-phrases,pos,graph,keywords", "Comma-separated fields: noun-phrases, pos, graph, keywords.")
    workers: int = option(2, "Parser processes (at least 1).")
    caption_key: str = option("caption", "Caption column (CSV/TSV), key (JSONL) or json field (shards).")
    with_prep: bool = option(False, "Keep a prepositional modifier: 'a man in a red shirt'.")
    shard_size: int = option(SHARD_SIZE, "Records per store shard: the unit a killed run resumes from.")
    part: str | None = option(None, "Run part i/n of the captions (0-based, split by caption hash).  [default: a SLURM array task's "
                                    "place, else all]")


NEGATIVE_KINDS = ("ceclip", "llm")  # --what of `compclip negatives`: which released negatives to fill in
CECLIP_NEGATIVES = "ceclip_negatives"  # the data field: CE-CLIP's adjective, noun and verb fills of a record's caption
LLM_NEGATIVES = "llm_negatives"  # the data field: SVLC-R+L's and DAC's fill-mask sentences of a record's caption, a list
# per masked word of a list per place it stands of that place's fills (`negatives.llm_masks`), as the releases draw them
NEGATIVES_SHARD_SIZE = 10_000  # records per chunk: the unit a killed run resumes from and parts divide


@dataclass(frozen=True)
class NegativesConfig:
    what: str = option(",".join(NEGATIVE_KINDS), "Comma-separated negatives: ceclip (CE-CLIP's adjective, noun and verb fills: "
                                                 "ceclip_negatives), llm (SVLC-R+L's and DAC's fill-mask sentences: llm_negatives).")
    fill_model: str = option("distilroberta-base", "The masked language model that fills the words in: a Hub name or a local "
                                                   "folder (the releases' own: distilroberta-base).")
    caption_key: str = option("caption", "Caption key of each JSON lines record.")
    shard_size: int = option(NEGATIVES_SHARD_SIZE, "Records per chunk: the unit a killed run resumes from.")
    part: str | None = option(None, "Run part i/n of the chunks (0-based, every n-th chunk).  [default: a SLURM array task's place, "
                                    "else all]")
    seed: int = option(0, "Seed of CE-CLIP's draw of which adjective, noun or verb is masked (drawn per caption).")
    batch_size: int = option(64, "Masked texts the fill model reads at once.")
