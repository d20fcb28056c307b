"""The published scoring rules, as pure functions of similarity scores.

Two tie rules: `strict` (sugar-crepe's `main_eval.py`: the right answer must score strictly
higher, so a tie is wrong) and `clip_benchmark` (CLIP_benchmark's `argmax`: the first of
equally scored options wins, so a tie goes to whichever option is listed first).
"""
from __future__ import annotations

import torch

from ..errors import NonFiniteError, UsageError

TIES = ("strict", "clip_benchmark")


def check_ties(ties: str) -> None:
    if ties not in TIES:
        raise UsageError(f"ties must be one of {TIES}, not {ties!r}")


def picks(scores: torch.Tensor, target: torch.Tensor | int, ties: str = "strict") -> torch.Tensor:
    """Whether each row's `target` option is the chosen one (rows of option scores)."""
    check_ties(ties)
    scores = torch.as_tensor(scores)
    nan_rows = torch.isnan(scores).any(dim=-1)
    if nan_rows.any():  # NaN compares false with everything: it would read as a wrong answer, not as a bug
        bad = nan_rows.nonzero()[:, 0]
        raise NonFiniteError(f"{len(bad)} of {scores.shape[0]} rows of scores hold NaN (first: row {bad[0].item()}): the model's "
                             "score is undefined there; refused")
    target = torch.as_tensor(target, device=scores.device).expand(scores.shape[0])
    if ties == "clip_benchmark":
        return scores.argmax(dim=-1) == target
    chosen = scores.gather(1, target[:, None])
    others = scores.clone()
    others.scatter_(1, target[:, None], float("-inf"))
    return chosen[:, 0] > others.max(dim=-1).values


def pair_accuracy(positive: torch.Tensor, negative: torch.Tensor, ties: str = "strict") -> torch.Tensor:
    """SugarCrepe: correct iff s(image, true) beats s(image, false); the true caption is listed first."""
    return picks(torch.stack([torch.as_tensor(positive), torch.as_tensor(negative)], dim=1), 0, ties)


def itt(p1: torch.Tensor, p2: torch.Tensor, n: torch.Tensor, ties: str = "strict") -> torch.Tensor:
    """SugarCrepe++ image-to-text: s(I,P1) > s(I,N) and s(I,P2) > s(I,N)."""
    return pair_accuracy(p1, n, ties) & pair_accuracy(p2, n, ties)


def tot(p1p2: torch.Tensor, p1n: torch.Tensor, p2n: torch.Tensor, ties: str = "strict") -> torch.Tensor:
    """SugarCrepe++ text-only: s(P1,P2) > s(P1,N) and s(P1,P2) > s(P2,N)."""
    return pair_accuracy(p1p2, p1n, ties) & pair_accuracy(p1p2, p2n, ties)


def winoground(s: torch.Tensor, ties: str = "strict") -> dict[str, torch.Tensor]:
    """Winoground on (N, 2 captions, 2 images) scores s[n, c, i]: text, image and group scores.

    text: each image prefers its own caption; image: each caption prefers its own image.
    """
    by_image = s.transpose(1, 2)  # [n, image, caption]
    text = picks(by_image[:, 0], 0, ties) & picks(by_image[:, 1], 1, ties)
    image = picks(s[:, 0], 0, ties) & picks(s[:, 1], 1, ties)
    return {"text": text, "image": image, "group": text & image}


def inpaint(s: torch.Tensor, ties: str = "strict") -> torch.Tensor:
    """InpaintCOCO's 2×2 rule on s[n, image, caption] (0 original, 1 inpainted):
    s(i_o,t_o) > s(i_i,t_o) and s(i_i,t_i) > s(i_o,t_i)."""
    return picks(s[:, :, 0], 0, ties) & picks(s[:, :, 1], 1, ties)


def query_ranks(scores: torch.Tensor, positives: torch.Tensor, ties: str = "strict") -> torch.Tensor:
    """The rank of each query's (row's) best match in the gallery (columns), `positives[q, g]` True for matches: 0 when
    it is retrieved first. strict: every other item scoring at least as high ranks above the match; clip_benchmark: only
    items scoring higher do (ties go to the match)."""
    check_ties(ties)
    if not torch.isfinite(scores).all():  # NaN ranks nowhere: every query would count as a hit
        raise NonFiniteError("retrieval scores hold NaN or inf: the model's score is undefined there; refused")
    best = scores.masked_fill(~positives, float("-inf")).max(dim=1, keepdim=True).values
    above = (scores >= best) if ties == "strict" else (scores > best)
    return (above & ~positives).sum(dim=1) if ties == "strict" else above.sum(dim=1)


def match_decisions(scores: torch.Tensor, threshold: float) -> torch.Tensor:
    """Each (image, text) pair decided a match (True) or not, as a model with a match classifier outputs 1 or 0: its
    score above `threshold`."""
    scores = torch.as_tensor(scores)
    if torch.isnan(scores).any():  # NaN is above no threshold: it would read as a decided non-match, not as a bug
        raise NonFiniteError(f"{int(torch.isnan(scores).sum())} of {scores.numel()} pair scores are NaN: the model's score is "
                             "undefined there; refused")
    return scores > threshold


def svo_probes_accuracy(positives: list[tuple[str, str]], positive_matched: torch.Tensor, negatives: list[tuple[str, str]],
                        negative_matched: torch.Tensor) -> dict[str, float | int]:
    """SVO-Probes' notebook (`accuracy`): each (sentence, image id) pair of the positives and of the negatives taken
    once (`drop_duplicates`), Pos the share of positive pairs decided a match, Neg the share of negative pairs decided
    not, and `acc` their mean (Avg = (Pos + Neg) / 2: each side weighs half, however many pairs it has)."""
    positive, negative = first_of_each(positives, positive_matched), first_of_each(negatives, negative_matched)
    pos = sum(positive.values()) / len(positive) if positive else float("nan")
    neg = sum(not m for m in negative.values()) / len(negative) if negative else float("nan")
    return {"acc": (pos + neg) / 2, "pos_acc": pos, "neg_acc": neg, "n_pos": len(positive), "n_neg": len(negative)}


def first_of_each(pairs: list[tuple[str, str]], decisions: torch.Tensor) -> dict[tuple[str, str], bool]:
    """Each distinct pair's decision, the first where it repeats (one pair has one score; a batch scored otherwise could
    move it by a rounding)."""
    once: dict[tuple[str, str], bool] = {}
    for pair, decision in zip(pairs, torch.as_tensor(decisions).tolist(), strict=True):
        once.setdefault(pair, bool(decision))
    return once


def recall_at_k(scores: torch.Tensor, positives: torch.Tensor, ks=(1, 5, 10), ties: str = "strict") -> dict[int, float]:
    """Recall@k for queries (rows) over a gallery (columns): a query counts at k if one of its matches ranks in the top k
    (`query_ranks`)."""
    rank = query_ranks(scores, positives, ties)
    return {k: (rank < k).float().mean().item() for k in ks}
