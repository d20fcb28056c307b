"""BLIP's retrieval model (`BlipForImageTextRetrieval`) as compclip scores it, by one of its two heads (`BLIP_SCORES`):

- `itm+itc` (the default): the match logit of the ITM head plus the ITC cosine, the score BLIP's own retrieval
  evaluation gives the candidates it re-ranks (`evaluation` in salesforce/BLIP's train_retrieval.py: ITC's top k,
  then `itm_head(...)[:, 1] + topk_sim`), and that ARO scores every pair of a pairwise benchmark with
  (model_zoo/blip_models.py, `run_scores_batched`: `score + sims[j]`);
- `itm`: the ITM head's probability of "match" (the softmax of its two logits, as transformers' model card reads it);
- `itc`: the cosine of the projected image and text CLS features, `use_itm_head=False`.

The ITM head reads each image's tokens and each caption together: every pair is one pass of the text encoder over
the image's cached tokens, so a retrieval benchmark's full matrix costs images × texts passes."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F

from ..errors import UsageError
from ..names import BLIP_SCORES
from ..precision import autocast
from ..scoring import DualEncoderScorer
from .dual import ProcessorPixels, processor_key


class BlipScorer(DualEncoderScorer):
    """`BlipForImageTextRetrieval` by `score` (one of `BLIP_SCORES`): ITC as a dual encoder (embeddings cached, the
    score their dot product), ITM over each pair, the image's tokens cached once per image."""

    def __init__(self, model, processor, score: str = BLIP_SCORES[0], device="cpu", batch_size: int = 64, workers: int = 2,
                 cache_dir: str | Path | None = None, precision: str = "fp32"):
        if score not in BLIP_SCORES:
            raise UsageError(f"--blip-score must be one of {', '.join(BLIP_SCORES)}, not {score!r}")
        super().__init__(model, ProcessorPixels(processor), processor.tokenizer, device=device,
                         batch_size=batch_size, workers=workers, precision=precision)
        self.score = score
        self.padding = {"padding": True, "truncation": True, "max_length": model.config.text_config.max_position_embeddings}
        self.cache = Path(cache_dir) / f"{processor_key(model, processor, self.padding)}-{precision}" if cache_dir else None
        self._tokens: dict[str, torch.Tensor] = {}  # image key -> its vision tokens, what the ITM head attends to
        self.encoded["tokens"] = 0

    # -- scores -----------------------------------------------------------------------
    def pairs(self, images, texts, boxes=None):
        if self.score == "itc":
            return super().pairs(images, texts, boxes)
        keys = self._image_keys(images, boxes)
        self._fill(self._tokens, keys, "tokens", self._encode_tokens)
        self._check_read(keys)
        self._asked.update(keys)
        return self._match(keys, list(texts))

    def matrix(self, images, texts):
        if self.score == "itc":
            return super().matrix(images, texts)
        images, texts = list(images), list(texts)
        every = self.pairs([i for i in images for _ in texts], texts * len(images))
        return every.view(len(images), len(texts))

    def class_scores(self, images, prompts):
        if self.score == "itc":
            return super().class_scores(images, prompts)
        return super(DualEncoderScorer, self).class_scores(images, prompts)  # the mean ITM score over a class's prompts

    @contextlib.contextmanager
    def blind(self, keys: set[str]) -> Iterator[None]:
        if self.score != "itc":
            raise UsageError(f"--blind replaces each image's embedding by their mean; BLIP's {self.score} score reads each "
                             "image's tokens with the caption: --blip-score itc")
        with super().blind(keys):
            yield

    # -- internals --------------------------------------------------------------------
    @torch.no_grad()
    def _match(self, keys: list[str], texts: list[str]) -> torch.Tensor:
        """The ITM score (and ITC's cosine, for `itm+itc`) of each (image key, text), in batches of pairs."""
        out = []
        for start in self._bar(range(0, len(keys), self.batch_size), "pairs", -(-len(keys) // self.batch_size)):
            batch_keys, batch_texts = keys[start : start + self.batch_size], texts[start : start + self.batch_size]
            tokens = self.tokenizer(batch_texts, return_tensors="pt", **self.padding).to(self.device)
            states = torch.stack([self._tokens[k] for k in batch_keys]).to(self.device)
            with autocast(self.device, self.precision):
                hidden = self.model.text_encoder(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"],
                                                 encoder_hidden_states=states,
                                                 encoder_attention_mask=torch.ones(states.shape[:-1], dtype=torch.long, device=self.device))
                logits = self.model.itm_head(hidden.last_hidden_state[:, 0, :]).float().cpu()
            out.append(logits.softmax(-1)[:, 1] if self.score == "itm" else logits[:, 1])
        scores = torch.cat(out) if out else torch.zeros(0)
        if self.score == "itm+itc":
            scores = scores + (self.images([self._sources[k][0] for k in keys], [self._sources[k][1] for k in keys])
                               * self.texts(texts)).sum(-1)
        return scores

    def _vision(self, batch: torch.Tensor) -> torch.Tensor:
        return self.model.vision_model(pixel_values=batch).last_hidden_state

    def _encode_tokens(self, keys: list[str]) -> tuple[list[str], torch.Tensor]:
        return self._over_images(keys, "image tokens", lambda batch: self._vision(batch).float())

    def _encode_images(self, keys: list[str]) -> tuple[list[str], torch.Tensor]:
        """ITC's image embedding: the projected CLS token, normalised (`use_itm_head=False`)."""
        return self._over_images(keys, "images", lambda batch: F.normalize(
            self.model.vision_proj(self._vision(batch)[:, 0, :]).float(), dim=-1))

    @torch.no_grad()
    def _encode_texts(self, keys: list[str]) -> tuple[list[str], torch.Tensor]:
        """ITC's text embedding: the text encoder alone (no image), its projected CLS token, normalised."""
        order = sorted(range(len(keys)), key=lambda i: len(keys[i]))
        step, rows = self.batch_size * 4, []
        for start in self._bar(range(0, len(keys), step), "texts", -(-len(keys) // step)):
            tokens = self.tokenizer([keys[i] for i in order[start : start + step]], return_tensors="pt", **self.padding).to(self.device)
            with autocast(self.device, self.precision):
                hidden = self.model.text_encoder(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"])
                rows.append(F.normalize(self.model.text_proj(hidden.last_hidden_state[:, 0, :]).float(), dim=-1).cpu())
        done = torch.cat(rows)
        out = torch.empty_like(done)
        out[torch.tensor(order)] = done
        return keys, out
