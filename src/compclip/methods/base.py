"""The method contract: a batch transform plus loss terms over model outputs, composable by name.

A method is a list of parts. Each part may add fields to a batch in the data loader
(`prepare`), extend the model outputs (`extend`), and turns outputs into named loss terms
(`forward`), like open_clip's losses. One part is the contrastive term (SigLIP, CLIP, or a
hard-negative InfoNCE); the others add terms (C2LIP's concept losses). In a combination
such as `c2lip+hardneg`, a contrastive part named later replaces an earlier one.

A part's `forward` sees this process's outputs only (`image_features`, `visual_tokens`, `text_features`,
`concept_features`, `concept_image`, ...) and hands them to its loss module, a `compclip.gather.GatheredLoss` in
open_clip's shape that gathers the other ranks' columns itself and returns the full-batch loss on every rank;
`Method.distribute` gives every such module the run's rank and world size.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UsageError
from ..gather import Gather, GatheredLoss
from ..models.tokens import TextWidth, encode_short_texts, text_token_states, visual_token_embeddings
from ..options import NoOptions, option  # noqa: F401  (re-exported: methods declare options with them)
from ..options import make_options as _make_options
from ..plugins import Registry

log = logging.getLogger("compclip.methods")


@dataclasses.dataclass(frozen=True)
class Output:
    """How the trainer carries one model output across micro-batches and ranks (`compclip.train.step`).

    - `rows`: one row per image of the batch; concatenated over micro-batches.
    - `owned`: rows that each belong to an image, whose local index is the output `owner`;
      concatenated with the owners offset by each micro-batch's first image.
    - `scalar`: one value shared by the batch (τ, b): the micro-batch with gradients passes 1/A of it.

    Ranks are the loss module's to join (`compclip.gather`): a part sees this process's outputs only.
    """

    kind: str
    owner: str | None = None


ROWS, SCALAR = Output("rows"), Output("scalar")


def owned(owner: str) -> Output:
    return Output("owned", owner)


class LossPart(nn.Module):
    """One piece of a method. Subclasses set `name`, `contrastive` and `needs`, and implement `forward`."""

    name = ""
    contrastive = False
    outputs: ClassVar[Mapping[str, Output]] = {}  # what `extend` adds, so the trainer can accumulate and gather it
    # model outputs the part reads beyond image/text features: "visual_tokens", "text_states"
    needs: frozenset[str] = frozenset()
    visual_layer = -1  # the vision block whose patch tokens "visual_tokens" maps (negative: from the last)
    uses_concepts = False  # reads concept records: the batch transform finds them in batch["concepts"], one per caption (or None)
    negative_concepts = False  # and each sample's negative caption's (a data field), in batch["negative_concepts"]
    uses_logit_bias = False  # a sigmoid loss; otherwise the trainer freezes an unused logit bias (DDP needs every parameter used)
    reads_captions = True  # reads the captions' own features (`text_features`); OC-CLIP encodes graph texts only
    # the token-id fields `prepare` adds and `extend` encodes: `Method.collate` measures each one's `TextWidth` on the host,
    # in `batch["widths"]`, where a causal tower on a GPU cuts it (`encode_short_texts(model, text, width)`)
    token_fields: tuple[str, ...] = ()
    locks_image = False  # trains with the image tower frozen
    # the view of each image (and image field) the method trains on where --image-view does not choose one: "train",
    # open_clip's training view, or "eval", its evaluation view, where a release trains on that (TripletCLIP's, CoN-CLIP's)
    image_view = "train"
    alone = False  # changes the inputs themselves (CLIC's image pairs): no other part may see them
    wants_partners = False  # each sample also carries a `partner` drawn by the reader from the whole data (its concepts too)
    # data fields each sample carries beyond (image, caption), which the reader takes from the record by these names
    # (`--field-key NAME=KEY` maps one to another key), each of the kind its name holds (`data.readers.field_kind`): DAC's
    # dense captions (a list of texts), TripletCLIP's negative caption (a text) and image (decoded and viewed as the image
    # is), NegCLIP's neighbours (record indices: the reader draws one and gives its image and caption as the sample's
    # negative_image and negative_caption); `prepare` finds them in `samples`
    sample_fields: tuple[str, ...] = ()
    # A part may own modules (nn.Module attributes, made in `bind`), used in its loss terms (`forward`): the optimizer
    # trains them at these rates (None: the run's), DDP wraps them, checkpoints save them as `method.safetensors`
    # and a resumed run restores them.
    lr: float | None = None
    weight_decay: float | None = None

    def image_transform(self, model: nn.Module, view: Callable | None = None) -> Callable | None:
        """The reader's image transform when the part needs more than `view`, the run's view of each image (None: the
        model's training view)."""
        return None

    def bind(self, model: nn.Module) -> None:
        """Create the modules the part owns, sized by the model: called once the model is loaded, before
        the optimizer is built or a checkpoint's `method.safetensors` is read."""

    def begin_step(self, step: int) -> None:
        """Called before each optimizer step, for a part whose behaviour depends on it (CLIC alternates)."""

    def admits(self, caption: str) -> bool:
        """Whether the part trains on this caption at all; the reader skips (and counts) the others."""
        return True

    def scorer(self, model: nn.Module, preprocess: Callable, tokenizer, **kwargs: Any):
        """The evaluation scorer of a model trained with this part (`compclip.eval.Scorer`), or None when
        its score is the dual encoder's dot product. `kwargs` are `DualEncoderScorer`'s settings."""
        return None

    def inputs(self, batch: dict[str, Any]) -> dict[str, Any]:
        """The batch the towers encode (`image`, `text`); a part may substitute its own."""
        return batch

    def prepare(self, batch: dict[str, Any], samples: list[dict[str, Any]], tokenizer) -> None:
        """Add this part's fields to a collated batch (runs in DataLoader workers). A part that reads concepts may narrow
        `batch["covered"]` (per caption: its concept record was found) to the captions its terms could use."""

    def extend(self, model: nn.Module, batch: dict[str, Any], out: dict[str, Any]) -> None:
        """Add this part's outputs (with gradients) to `out`."""

    def forward(self, out: dict[str, Any]) -> dict[str, torch.Tensor]:
        raise NotImplementedError


class Method(nn.Module):
    """Parts combined: one batch transform, one forward, the union of their loss terms."""

    def __init__(self, name: str, parts: list[LossPart], concepts=None):
        super().__init__()
        kept: list[LossPart] = []
        for part in parts:  # a later contrastive part replaces an earlier one
            if part.contrastive:
                kept = [p for p in kept if not p.contrastive]
            kept = [p for p in kept if p.name != part.name] + [part]
        if sum(p.contrastive for p in kept) != 1:
            raise UsageError(f"method {name!r} needs exactly one contrastive part, got {[p.name for p in kept]}")
        lone = [p.name for p in kept if p.alone]
        if lone and len(kept) > 1:
            raise UsageError(
                f"method {name!r}: {lone[0]} trains on its own inputs and cannot be combined with {[p.name for p in kept if not p.alone]}"
            )
        self.name = name
        self.parts = nn.ModuleList(kept)
        self.needs = frozenset().union(*(p.needs for p in kept))
        layers = {p.visual_layer for p in kept if "visual_tokens" in p.needs}
        if len(layers) > 1:
            raise UsageError(f"method {name!r}: its parts read visual tokens of different layers {sorted(layers)}")
        self.visual_layer = layers.pop() if layers else -1
        self.output_kinds = {**BASE_OUTPUTS, **{k: v for p in kept for k, v in p.outputs.items()}}
        self.locks_image = any(p.locks_image for p in kept)
        self.image_view = next(p.image_view for p in kept if p.contrastive)  # the part whose release the data follows
        self.uses_logit_bias = any(p.uses_logit_bias for p in kept)
        self.reads_captions = any(p.reads_captions for p in kept)
        self.uses_concepts = any(p.uses_concepts for p in kept)
        self.wants_partners = any(p.wants_partners for p in kept)
        self.sample_fields = tuple(dict.fromkeys(f for p in kept for f in p.sample_fields))
        self.token_fields = tuple(dict.fromkeys(("text", *(f for p in kept for f in p.token_fields))))
        self.concepts = concepts
        self._missing = 0  # captions without a concept record, counted per process
        for module in self.modules():  # their indices come from `collate`, in range: reading them would stall a GPU's step
            if isinstance(module, GatheredLoss):
                module.read_indices = False

    def begin_step(self, step: int) -> None:
        for part in self.parts:
            part.begin_step(step)

    def distribute(self, rank: int, world_size: int, group=None) -> Method:
        """Make every loss module of the parts gather over `world_size` ranks (open_clip's arguments)."""
        for module in self.modules():
            if isinstance(getattr(module, "gather", None), Gather):
                module.gather = Gather(rank, world_size, group)
        return self

    def admits(self, caption: str) -> bool:
        return all(p.admits(caption) for p in self.parts)

    def bind(self, model: nn.Module) -> Method:
        device = next(model.parameters()).device
        for part in self.parts:
            part.bind(model)
        return self.to(device)

    def scorer(self, model: nn.Module, preprocess: Callable, tokenizer, **kwargs: Any):
        return next((s for s in (p.scorer(model, preprocess, tokenizer, **kwargs) for p in self.parts) if s is not None), None)

    def param_groups(self, lr: float, weight_decay: float) -> list[dict[str, Any]]:
        """Optimizer groups of the parts' own parameters, each at its part's rates (default: the run's)."""
        groups = []
        for part in self.parts:
            params = [p for p in part.parameters() if p.requires_grad]
            if params:
                groups.append({"params": params, "lr": lr if part.lr is None else part.lr,
                               "weight_decay": weight_decay if part.weight_decay is None else part.weight_decay})
        return groups

    def image_transform(self, model: nn.Module, view: Callable | None = None) -> Callable | None:
        return next((t for t in (p.image_transform(model, view) for p in self.parts) if t is not None), None)

    def collate(self, samples: list[dict[str, Any]], tokenizer, width: TextWidth | None = None) -> dict[str, Any]:
        """Stack images, tokenize captions, then let each part add its fields; with the model's `width` (`text_width`),
        measure how far a causal tower reads each token field (`batch["widths"]`), here on the host."""
        batch = {
            "image": torch.stack([s["image"] for s in samples]),
            "caption": [s["caption"] for s in samples],
            "text": tokenizer([s["caption"] for s in samples]),
        }
        for key in ("shard", "pos"):  # data-position bookkeeping for exact resume
            if key in samples[0]:
                batch[key] = torch.tensor([s[key] for s in samples])
        if self.uses_concepts:
            batch["concepts"] = self.concept_records(samples)
            batch["covered"] = [r is not None for r in batch["concepts"]]
            if "partner" in samples[0]:
                batch["partner_concepts"] = self.concept_records([s["partner"] for s in samples])
            if any(p.negative_concepts for p in self.parts):  # "negative_caption": TripletCLIP's data field, or a neighbour's
                batch["negative_concepts"] = self.concept_records([{"caption": s["negative_caption"]} for s in samples])
        for part in self.parts:
            part.prepare(batch, samples, tokenizer)
        if self.uses_concepts:  # what the trainer counts and reports: the captions the concept terms could use
            covered = batch.pop("covered")
            batch["coverage"] = torch.tensor([sum(covered), len(covered)])
            batch["uncovered"] = next((c for c, ok in zip(batch["caption"], covered, strict=True) if not ok), "")
        if width is not None:
            batch["widths"] = {key: width(batch[key]) for key in self.token_fields if key in batch}
        return batch

    def concept_records(self, samples: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
        """Each sample's concept record: its own (shards made by `--into-shards`), else the store's, looked up
        for the whole batch at once; a caption the store lacks trains without concepts (warned)."""
        wanted = [s["caption"] for s in samples if "concepts" not in s]
        if self.concepts is None:
            found = [None] * len(wanted)
        elif hasattr(self.concepts, "get_many"):
            found = self.concepts.get_many(wanted)
        else:  # a plain mapping
            found = [self.concepts.get(c) for c in wanted]
        for caption, record in zip(wanted, found, strict=True):
            if record is None:
                self._missing += 1
                if self._missing <= 3:
                    log.warning("no concepts for caption %r: run `compclip concepts` over the training data", caption)
        looked_up = iter(found)
        return [s["concepts"] if "concepts" in s else next(looked_up) for s in samples]

    def outputs(self, model: nn.Module, batch: dict[str, Any]) -> dict[str, Any]:
        """One forward pass of both towers, computing per-token outputs only when a part needs them."""
        for part in self.parts:
            batch = part.inputs(batch)
        out: dict[str, Any] = {}
        if "visual_tokens" in self.needs:
            pooled, out["visual_tokens"] = visual_token_embeddings(model, batch["image"], self.visual_layer)
        else:
            pooled = model.encode_image(batch["image"])
        out["image_features"] = F.normalize(pooled, dim=-1)
        if "text_states" in self.needs:
            text_pooled, out["text_states"], out["text_project"] = text_token_states(model, batch["text"])
            out["text_features"] = F.normalize(text_pooled, dim=-1)
        elif self.reads_captions:  # cut after the batch's longest caption where that cannot change a feature (a causal tower)
            out["text_features"] = F.normalize(encode_short_texts(model, batch["text"], text_width_of(batch, "text")), dim=-1)
        out["logit_scale"] = model.logit_scale.exp()
        out["logit_bias"] = model.logit_bias
        for part in self.parts:
            part.extend(model, batch, out)
        out.pop("text_states", None)
        out.pop("text_project", None)
        return out

    def forward(self, out: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Every part's loss terms, each the full batch's value on every rank."""
        terms: dict[str, torch.Tensor] = {}
        local = LocalOutputs(out)
        for part in self.parts:
            terms.update(part(local))
        return terms


class LocalOutputs(dict):
    """This process's model outputs, as a part's `forward` reads them. The gathered columns (`all_*`, `image_offset`,
    `gather_image_rows`) that parts once read are gone: asking for one is an error, never a local-batch loss."""

    GONE = ("all_", "image_offset", "gather_image_rows")

    def _refuse(self, key) -> None:
        if isinstance(key, str) and key.startswith(self.GONE):
            raise UsageError(f"a loss part asked for {key!r}: parts see this process's outputs only and gather the rest in their "
                             "loss module (`compclip.gather.GatheredLoss`, e.g. `self.loss = SigLIPLoss()`), which "
                             "`Method.distribute` sets up for every rank")

    def __getitem__(self, key):
        self._refuse(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._refuse(key)
        return super().get(key, default)


BASE_OUTPUTS = {"image_features": ROWS, "text_features": ROWS, "visual_tokens": ROWS, "logit_scale": SCALAR,
                "logit_bias": SCALAR}


def sigmoid_pairs_loss(logits: torch.Tensor, positive: torch.Tensor, count: int) -> torch.Tensor:
    """−Σ log σ(z·logits) / count with z = +1 on `positive` pairs and −1 elsewhere."""
    z = positive.to(logits.dtype) * 2 - 1
    return -F.logsigmoid(z * logits).sum() / count


def text_width_of(batch: dict[str, Any], *keys: str) -> int | None:
    """The widest `TextWidth` the collate measured for these token fields (None where it measured none: a batch a
    user's own loop made, or a tower that cutting would change)."""
    widths = batch.get("widths") or {}
    return max(widths[k] for k in keys) if all(k in widths for k in keys) else None


def with_text(batch: dict[str, Any], text: torch.Tensor, field: str) -> dict[str, Any]:
    """`batch` whose captions' token ids are `text`, taken from the token field `field` (whose width it takes)."""
    widths = batch.get("widths")
    return {**batch, "text": text, **({"widths": {**widths, "text": widths[field]}} if widths and field in widths else {})}


def image_rows(n: int, device, image_offset: int = 0) -> torch.Tensor:
    """Global indices of the `n` local image rows."""
    return torch.arange(n, device=device) + image_offset


def require_concept_fields(concepts, fields: tuple[str, ...], method: str) -> None:
    """Fail early, not mid-run, when a concept store lacks fields a method reads."""
    missing = [f for f in fields if f not in getattr(concepts, "what", fields)]  # a plain mapping is trusted
    if missing:
        wanted = ",".join(f.replace("_", "-") for f in fields)
        raise UsageError(f"method {method} reads concept fields {missing} that the store {getattr(concepts, 'folder', '')} lacks: "
                         f"build a store with `compclip concepts --what {wanted}`")

MethodFactory = Callable[..., list[LossPart]]  # factory(options, *, concepts, seed) -> parts


@dataclasses.dataclass(frozen=True)
class MethodEntry:
    """A registered method: the factory of its loss parts, its options dataclass (fields made with `option`: `compclip
    methods` lists them, `--method-opt KEY=VALUE` sets them), and the concept-record fields its parts read ("noun_phrases",
    "pos", "graph": a store that lacks one is refused before training, and the demo builds its store from them)."""

    name: str
    build: MethodFactory
    options: type = NoOptions
    concept_fields: tuple[str, ...] = ()


METHODS: Registry[MethodEntry] = Registry("method", __package__, "compclip.methods")


def register_method(name: str, factory: MethodFactory, options: type = NoOptions, concept_fields: tuple[str, ...] = ()) -> MethodEntry:
    """Make `factory(options, concepts=..., seed=...) -> [LossPart, ...]` available as `name` (`MethodEntry`)."""
    return METHODS.register(name, MethodEntry(name, factory, options, tuple(concept_fields)))


def make_options(method: str, declared: list[type], given: Mapping[str, Any]) -> list[Any]:
    """One options instance per declared dataclass of a method's parts (`compclip.options.make_options`)."""
    return _make_options(declared, given, owner=f"method {method}", flag="--method-opt {key}", listing="compclip methods")
