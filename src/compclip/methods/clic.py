"""CLIC: concatenated image pairs, several positives, a cross-sentence POS-swap negative (docs/methods.md §3).

Each image is paired with a partner of the same orientation, drawn from the whole training data
as the authors do (or from its own batch: `partner=batch`); the two are joined in random order
(portrait images side by side at half width, landscape ones one above the other at half height,
each resized with the model's own preprocessing). Its captions are
p1 = s_i + s_m, p2 = s_m + s_i (first sentences) and p3, p4 (other sentences of each, joined in
random order); the negative swaps one word of s_i with one word of s_m of the same universal
POS tag and joins the two in random order. L = ½ L_Cont + ½ L_S-Neg + L_Uni (squared L2, as the
authors' code); every second step is a plain CLIP step on
single images with their first sentence. The vision tower is frozen unless asked otherwise.
POS tags come from the concept store, so no spaCy runs in the data loader.
"""
from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from ..errors import UsageError
from ..gather import GatheredLoss
from ..models.tokens import encode_short_texts
from ..text import caption_rng, sentences
from .base import ROWS, LossPart, Output, option, owned, register_method, text_width_of, with_text
from .clip import CLIPLoss, clip_loss
from .text import join_sentences, recase

UNI_DISTANCES = ("squared", "l2")
PARTNERS = ("dataset", "batch")
EXCLUDED_POS = frozenset({"AUX", "CCONJ", "DET", "INTJ", "PART", "PUNCT", "SCONJ", "SYM", "X", "SPACE"})

Token = tuple[str, int, int, str]  # text, start, end, universal POS


class PairViews:
    """The reader transform CLIC needs: the run's view of the image (`full`; None: the model's training view), plus the
    half-size views for pairing."""

    def __init__(self, model: torch.nn.Module, full: Callable | None = None):
        from open_clip.transform import PreprocessCfg
        from torchvision import transforms as T

        from ..models.factory import train_preprocess

        cfg = PreprocessCfg(**model.visual.preprocess_cfg)
        h, w = (cfg.size, cfg.size) if isinstance(cfg.size, int) else tuple(cfg.size)
        if h % 2 or w % 2:
            raise UsageError(f"CLIC joins two half-size images: the model's input size {h}x{w} must be even")
        self.full = train_preprocess(model) if full is None else full
        mode = T.InterpolationMode[cfg.interpolation.upper()]
        tail = [T.ToTensor(), T.Normalize(cfg.mean, cfg.std)]
        self.tall = T.Compose([T.Resize((h, w // 2), interpolation=mode), *tail])  # portrait: side by side
        self.wide = T.Compose([T.Resize((h // 2, w), interpolation=mode), *tail])  # landscape: one above the other

    def __call__(self, img) -> dict[str, Any]:
        rgb = img.convert("RGB")  # both half views: a partner of the other orientation, where a batch has no other, takes this one's
        return {"image": self.full(img), "tall": self.tall(rgb), "wide": self.wide(rgb), "portrait": img.height > img.width}


def join_pair(first: dict[str, Any], second: dict[str, Any]) -> torch.Tensor:
    """Two samples' half-size views as one full-size image, `first` left or on top: side by side at half width where
    `first` is a portrait image, one above the other at half height otherwise (the authors' `transform_and_random_concat`)."""
    view = "tall" if first["portrait"] else "wide"
    return torch.cat([first[view], second[view]], dim=2 if first["portrait"] else 1)


def cross_sentence_swap(a: str, a_tokens: Sequence[Token], b: str, b_tokens: Sequence[Token], rng: random.Random,
                        every: bool = True) -> tuple[str, str] | None:
    """`a` and `b` with one word exchanged: same universal POS tag (not an excluded one), different words.

    Words that both sentences hold with the same tag are not candidates. Without a common tag,
    two random words (any tag but punctuation) are exchanged; None when no two words differ. With `every`, each
    whole-word occurrence of the drawn word is replaced in its sentence (the authors' `swap_words_between_texts`, a
    regular expression over the text); otherwise only the drawn occurrence.
    """
    def by_tag(tokens):
        out: dict[str, list[Token]] = {}
        for tok in tokens:
            if tok[3] not in EXCLUDED_POS:
                out.setdefault(tok[3], []).append(tok)
        return out

    tags_a, tags_b = by_tag(a_tokens), by_tag(b_tokens)
    choices = {}
    for tag in sorted(tags_a.keys() & tags_b.keys()):
        words_a = {t[0].lower() for t in tags_a[tag]}
        words_b = {t[0].lower() for t in tags_b[tag]}
        only_a = [t for t in tags_a[tag] if t[0].lower() not in words_b]
        only_b = [t for t in tags_b[tag] if t[0].lower() not in words_a]
        if only_a and only_b:
            choices[tag] = (only_a, only_b)
    if choices:
        only_a, only_b = choices[rng.choice(sorted(choices))]
        x, y = rng.choice(only_a), rng.choice(only_b)
    else:
        words = lambda tokens: [t for t in tokens if t[3] not in ("PUNCT", "SYM", "SPACE")]  # noqa: E731
        pairs = [(x, y) for x in words(a_tokens) for y in words(b_tokens) if x[0].lower() != y[0].lower()]
        if not pairs:
            return None
        x, y = rng.choice(pairs)
    return replace_word(a, x, y, every), replace_word(b, y, x, every)


def replace_word(text: str, old: Token, new: Token, every: bool) -> str:
    """`text` with the token `old` (or, with `every`, each whole-word occurrence of its text) replaced by `new`'s word,
    a sentence-initial capital staying at the start."""
    spans = [(m.start(), m.end()) for m in re.finditer(rf"\b{re.escape(old[0])}\b", text)] if every else []
    if (old[1], old[2]) not in spans:  # the token itself, whatever the regular expression makes of its edges
        spans = sorted([*spans, (old[1], old[2])])
    for start, end in reversed(spans):
        text = text[:start] + recase(new[0], new[1] == 0, text[start:end], start == 0) + text[end:]
    return text


def sentence_tokens(record: dict[str, Any] | None, span: tuple[int, int]) -> list[Token]:
    """The POS tokens of the caption's record inside `span`, with offsets relative to it."""
    start, end = span
    return [(t, s - start, e - start, tag) for t, s, e, tag in (record or {}).get("pos", ()) if s >= start and e <= end]


@dataclass(frozen=True)
class Options:
    train_image: bool = option(False, "train the vision tower too (frozen by default, as the paper)")
    lambda_cont: float = option(0.5, "weight of the contrastive loss over the four positives")
    lambda_neg: float = option(0.5, "weight of the swapped-negative loss L_S-Neg")
    lambda_uni: float = option(1.0, "weight of the uni-modal loss between φ(p1) and φ(p2)")
    uni_distance: str = option("squared", "squared: ‖φ(p1) − φ(p2)‖², the authors' losses.py; l2: ‖φ(p1) − φ(p2)‖")
    swap_every: bool = option(True, "the negative replaces every occurrence of the two swapped words, as the authors' "
                                    "swap_words_between_texts; false: only the drawn occurrence")
    partner: str = option("dataset", "dataset: each image's partner is drawn from the whole training data, of the same "
                                     "orientation, as the authors' dataset does (CSV, JSON or .npy data); batch: from the "
                                     "image's own micro-batch")


class CLICLoss(GatheredLoss):
    """CLIC's loss on a batch of concatenated image pairs, over the batch of every rank: `CLICLoss(rank=, world_size=)(
    image_features, positive_features, negative_features, negative_image, logit_scale)` gives
    `{"cont": λ_cont L_Cont, "sneg": λ_neg L_S-Neg, "uni": λ_uni L_Uni}`, each the full batch's value on every rank.

    `positive_features` (B, P, D): each pair image's P positive captions (p1 = s_i + s_m first, then p2 = s_m + s_i, p3, p4);
    `negative_features` (K, D) with `negative_image` (K,), the local index of each negative's image (its cross-sentence
    swap, from `cross_sentence_swap`). CLIC's plain steps (every second one) are `CLIPLoss`'s.
    """

    def __init__(self, lambda_cont: float = 0.5, lambda_neg: float = 0.5, lambda_uni: float = 1.0, uni_distance: str = "squared",
                 rank: int = 0, world_size: int = 1, group=None):
        super().__init__(rank, world_size, group)
        if uni_distance not in UNI_DISTANCES:
            raise UsageError(f"uni_distance must be one of {', '.join(UNI_DISTANCES)}, not {uni_distance!r}")
        self.lambda_cont, self.lambda_neg, self.lambda_uni, self.uni_distance = lambda_cont, lambda_neg, lambda_uni, uni_distance

    def forward(self, image_features, positive_features, negative_features, negative_image, logit_scale) -> dict[str, torch.Tensor]:
        self.check_inputs(image_features, per_image={"positive_features": positive_features}, negative_features=negative_features,
                          negative_image=negative_image, logit_scale=logit_scale)
        image, positives, scale = image_features, positive_features, logit_scale
        counts = self.gather.counts(image)
        all_image, all_positives = self.gather.rows(image, counts), self.gather.rows(positives, counts)
        offset, n = self.gather.first(counts), all_image.shape[0]
        cont = sum(clip_loss(image, positives[:, k], scale, all_image=all_image, all_text=all_positives[:, k],
                             image_offset=offset) for k in range(positives.shape[1])) / positives.shape[1]
        owners = negative_image
        s_pos = scale * (image[owners, None] * positives[owners]).sum(-1)  # (negatives, P)
        s_neg = scale * (image[owners] * negative_features).sum(-1, keepdim=True)
        sneg = F.softplus(s_neg - s_pos).mean(-1).sum() / n  # −log(e^p / (e^p + e^n)) = softplus(n − p)
        gap = positives[:, 0] - positives[:, 1]
        uni = (gap.square().sum(-1) if self.uni_distance == "squared" else gap.norm(dim=-1)).sum() / n
        total = self.gather.total
        return {"cont": total(self.lambda_cont * cont), "sneg": total(self.lambda_neg * sneg), "uni": total(self.lambda_uni * uni)}


class CLICPart(LossPart):
    """½ L_Cont + ½ L_S-Neg + L_Uni on concatenated pairs, alternating with plain CLIP steps."""

    name = "clic"
    contrastive = True
    outputs: ClassVar[Mapping[str, Output]] = {"positive_features": ROWS, "negative_features": owned("negative_image")}
    uses_concepts = True
    token_fields = ("positive_text", "first_text", "negative_text")
    alone = True

    def __init__(self, options: Options = Options(), seed: int = 0):
        super().__init__()
        o = options
        if o.partner not in PARTNERS:
            raise UsageError(f"partner must be one of {', '.join(PARTNERS)}, not {o.partner!r}")
        self.loss, self.plain = CLICLoss(o.lambda_cont, o.lambda_neg, o.lambda_uni, o.uni_distance), CLIPLoss()
        self.swap_every = o.swap_every
        self.wants_partners = o.partner == "dataset"
        self.seed = seed
        self.locks_image = not o.train_image
        self.step = 0

    def image_transform(self, model, view=None):
        return PairViews(model, view)

    def texts(
        self, i: int, m: int, parsed: Sequence[tuple[list[str], tuple[int, int], Any]], rng: random.Random
    ) -> tuple[str, list[str], str | None]:
        """Image i's first sentence, its positives p1-p4 with partner m, and the negative (None if none exists).

        `parsed[k]` holds caption k's sentences, the span of its first one, and its concept record.
        """
        (sents_i, first_span_i, record_i), (sents_m, first_span_m, record_m) = parsed[i], parsed[m]
        positives = [join_sentences(sents_i[0], sents_m[0]), join_sentences(sents_m[0], sents_i[0])]
        rest = [t[1:] or t[:1] for t in (sents_i, sents_m)]  # a one-sentence caption repeats its only sentence
        draws = [rng.sample(r, 2) if len(r) >= 2 else [rng.choice(r), rng.choice(r)] for r in rest]
        for x, y in zip(*draws, strict=True):
            positives.append(join_sentences(*((x, y) if rng.random() < 0.5 else (y, x))))
        swapped = cross_sentence_swap(
            sents_i[0], sentence_tokens(record_i, first_span_i), sents_m[0], sentence_tokens(record_m, first_span_m), rng,
            self.swap_every,
        )
        if swapped is None:
            return sents_i[0], positives, None
        return sents_i[0], positives, join_sentences(*(swapped if rng.random() < 0.5 else swapped[::-1]))  # in random order

    def prepare(self, batch, samples, tokenizer):
        n = len(samples)
        if n < 2:
            raise UsageError("CLIC pairs images within a batch: the batch size must be at least 2")
        if "tall" not in samples[0]:
            raise ValueError("CLIC needs its own image transform (`CLICPart.image_transform`): the reader gave plain images")
        if self.wants_partners and "partner" not in samples[0]:
            raise ValueError("CLIC with partner=dataset pairs each image with the partner its reader drew (`reader.partners`): "
                             "the samples carry none")
        rng = caption_rng(self.seed, *batch["caption"])  # the same batch pairs the same way after a resume
        # the images, then (drawn by the reader from the whole data) each one's partner: image i's is n + i
        views = samples + [s["partner"] for s in samples] if self.wants_partners else samples
        captions = batch["caption"] + [s["caption"] for s in views[n:]]
        parsed = []  # each caption split and looked up once, though it may serve as image and as partner
        for caption, record in zip(captions, batch["concepts"] + batch.get("partner_concepts", []), strict=True):
            spans = sentences(caption)
            parsed.append(([caption[s:e] for s, e in spans], spans[0], record))
        portrait = [bool(s["portrait"]) for s in samples]
        pairs, firsts, positives, negatives, owners = [], [], [], [], []
        for i in range(n):
            if self.wants_partners:
                m = n + i
            else:
                same = [j for j in range(n) if j != i and portrait[j] == portrait[i]]
                m = rng.choice(same or [j for j in range(n) if j != i])
            pairs.append((i, m) if rng.random() < 0.5 else (m, i))
            first, pos, neg = self.texts(i, m, parsed, rng)
            firsts.append(first)
            positives.append(pos)
            if neg is not None:
                negatives.append(neg)
                owners.append(i)
        batch["pair_order"] = torch.tensor(pairs, dtype=torch.long)
        batch["pair_image"] = torch.stack([join_pair(views[a], views[b]) for a, b in pairs])
        batch["positives"], batch["negatives"] = positives, negatives
        batch["positive_text"] = tokenizer([p for pos in positives for p in pos]).view(n, 4, -1)
        batch["first_text"] = tokenizer(firsts)
        batch["negative_text"] = tokenizer(negatives) if negatives else batch["first_text"][:0]
        batch["negative_image"] = torch.tensor(owners, dtype=torch.long)

    def begin_step(self, step):
        self.step = step

    def pair_step(self) -> bool:
        """Even steps train on pairs, odd steps are plain CLIP steps."""
        return self.step % 2 == 0

    def inputs(self, batch):
        if self.pair_step():
            return {**with_text(batch, batch["positive_text"][:, 0], "positive_text"), "image": batch["pair_image"]}
        return with_text(batch, batch["first_text"], "first_text")

    def extend(self, model, batch, out):
        if not self.pair_step():
            return
        more = batch["positive_text"][:, 1:]
        texts = torch.cat([more.reshape(-1, more.shape[-1]), batch["negative_text"]])
        features = encode_short_texts(model, texts, text_width_of(batch, "positive_text", "negative_text"))
        features = F.normalize(features, dim=-1)
        n = more.shape[0] * more.shape[1]
        out["positive_features"] = features[:n].view(more.shape[0], more.shape[1], -1)
        out["negative_features"], out["negative_image"] = features[n:], batch["negative_image"]

    def forward(self, out):
        if "positive_features" not in out:
            return {"clip": self.plain(out["image_features"], out["text_features"], out["logit_scale"])}
        positives = torch.cat([out["text_features"][:, None], out["positive_features"]], dim=1)
        return self.loss(out["image_features"], positives, out["negative_features"], out["negative_image"], out["logit_scale"])


def build(options: Options, *, concepts=None, seed: int = 0) -> list[LossPart]:
    return [CLICPart(options, seed)]


register_method("clic", build, Options, ("pos",))
