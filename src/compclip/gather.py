"""The cross-rank gather inside every loss, as open_clip's losses take it: `rank`, `world_size` (and a process group).

A batch split over ranks is trained as one batch: each rank's loss is its own rows (its images) against the columns of
the whole batch, gathered from every rank with gradients (`rows`); it sums over its rows and divides by the global
count, so the ranks' shares add up to the full-batch loss. `total` turns a share into what a training loop wants from
a loss: on every rank the full-batch value, with the share's gradient times the world size, which DDP's gradient
average makes the full batch's gradient. In one process every call is the identity, and a loss built for one process
inside a process group of several is refused rather than trained on its local batch.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from .errors import UsageError

__all__ = ["Gather", "GatheredLoss"]


class _GatherRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, counts: list[int], rank: int, group) -> torch.Tensor:
        ctx.counts, ctx.rank, ctx.group = counts, rank, group
        padded = x.new_zeros((max(counts), *x.shape[1:]))
        padded[: x.shape[0]] = x
        parts = [torch.empty_like(padded) for _ in counts]
        dist.all_gather(parts, padded, group=group)
        return torch.cat([p[:n] for p, n in zip(parts, counts, strict=True)])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)  # every rank's loss saw every row: sum their gradients
        start = sum(ctx.counts[: ctx.rank])
        return grad[start : start + ctx.counts[ctx.rank]], None, None, None


class Gather:
    """One rank's view of a batch split over `world_size` ranks (open_clip's arguments); `group`: the process group of
    the gathers (default: torch's default group)."""

    def __init__(self, rank: int = 0, world_size: int = 1, group=None):
        if not 0 <= rank < world_size:
            raise UsageError(f"rank {rank} is not one of world_size {world_size}'s ranks")
        self.rank, self.world_size, self.group = rank, world_size, group

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def check(self, loss: str) -> None:
        """Refuse to compute a local-batch loss where several processes train: the loss was built without their count."""
        if not self.distributed and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            raise UsageError(f"{loss} runs in a process group of {dist.get_world_size()} ranks but was built for one: build it "
                             "with rank=dist.get_rank(), world_size=dist.get_world_size() (or `Method.distribute`), or it trains on "
                             "each rank's own batch")

    def counts(self, x: torch.Tensor) -> list[int]:
        """Every rank's number of rows of `x`, in rank order."""
        if not self.distributed:
            return [x.shape[0]]
        counts = [torch.zeros(1, dtype=torch.long, device=x.device) for _ in range(self.world_size)]
        dist.all_gather(counts, torch.tensor([x.shape[0]], dtype=torch.long, device=x.device), group=self.group)
        return [int(c.item()) for c in counts]

    def rows(self, x: torch.Tensor, counts: list[int] | None = None) -> torch.Tensor:
        """The rows of `x` from every rank in rank order, differentiable (`counts`: known already)."""
        if not self.distributed:
            return x
        return _GatherRows.apply(x, counts or self.counts(x), self.rank, self.group)

    def first(self, counts: list[int]) -> int:
        """The global index of this rank's first row, given every rank's `counts`."""
        return sum(counts[: self.rank])

    def local_rows(self, counts: list[int], device) -> torch.Tensor:
        """The global indices of this rank's rows."""
        return torch.arange(counts[self.rank], device=device) + self.first(counts)

    def owned(self, x: torch.Tensor, owner: torch.Tensor, image_counts: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows that each belong to an image (`owner`: its local index) from every rank, the owners as global indices."""
        if not self.distributed:
            return x, owner
        counts = self.counts(x)
        return self.rows(x, counts), self.rows(owner + self.first(image_counts), counts)

    def total(self, share: torch.Tensor) -> torch.Tensor:
        """The full-batch loss on every rank, from this rank's share; its gradient is the share's times the world size."""
        if not self.distributed:
            return share
        value = share.detach().clone()
        dist.all_reduce(value, group=self.group)
        scaled = share * self.world_size
        return scaled + (value - scaled.detach())


class GatheredLoss(nn.Module):
    """A loss in open_clip's shape: built with `rank` and `world_size`, called with this rank's tensors, gathering the
    rest itself through `self.gather` (`compclip.methods.Method.distribute` sets it for a whole method).

    `read_indices`: whether `check_inputs` reads the index tensors' values to refuse one out of range. A `Method` turns
    it off for its parts' losses: its collate made their indices in range, and a read in compclip's training step would
    make the host wait for the queued forward pass every step (tests/test_device_reads.py)."""

    read_indices = True
    label = ""  # the name its errors give (default: its class's); a loss made of others gives them its own

    def __init__(self, rank: int = 0, world_size: int = 1, group=None):
        super().__init__()
        self.gather = Gather(rank, world_size, group)

    def check_inputs(self, image_features: torch.Tensor, text_features: torch.Tensor | None = None, *,
                     per_image: dict[str, torch.Tensor] | None = None, **others) -> None:
        """One error naming the argument for inputs the loss cannot mean, which it would otherwise turn into a number
        (a user's own loop then trains on it): image and text rows that do not pair, an empty batch (NaN), features
        that are not floating point (rows, dimension) of one width, tensors on another device, indices that are not
        integers, one to a row of their features, naming one of this rank's images. `per_image`: more tensors with a
        row per image, of any shape after it (CLIC's positives, the visual tokens); `others`, by their names:
        `X_features` more features (any number of rows: negatives, concepts), `X_image` the local index of the image
        that each row of `X_features` belongs to, `relation_ends` (OC-CLIP's) indices among the `node_features` of
        each relation's image; the rest (scalars) are checked for their device only. Shapes, dtypes and devices
        cost nothing; the indices' values are read back once a call (`read_indices`), all of them together: a user's
        loop waits there for its forward pass once a step, where an index past the batch trains on a wrong pair
        without a word (-1 is the last image to PyTorch's indexing)."""
        loss = self.label or type(self).__name__
        self.gather.check(loss)
        paired = {"text_features": text_features} if text_features is not None else {}
        given = {k: v for k, v in others.items() if v is not None}
        features = {"image_features": image_features, **paired, **{k: v for k, v in given.items() if k.endswith("_features")}}
        indices = {k: v for k, v in given.items() if k.endswith("_image") or k == "relation_ends"}
        for name, x in {**features, **(per_image or {})}.items():
            if not x.is_floating_point():
                raise UsageError(f"{loss}: {name} is of dtype {x.dtype}: features are floating point, as the towers give them")
        for name, x in features.items():
            if x.ndim != 2:
                raise UsageError(f"{loss}: {name} must be (rows, dimension), not of shape {tuple(x.shape)}")
        if image_features.shape[0] == 0:
            raise UsageError(f"{loss}: image_features has no rows: an empty batch has no loss (a DataLoader's last, short batch: "
                             "drop_last=True)")
        for name, x in {**paired, **(per_image or {})}.items():
            if x.ndim < 2 or x.shape[0] != image_features.shape[0]:
                raise UsageError(f"{loss}: image_features has {image_features.shape[0]} rows and {name} "
                                 f"{x.shape[0] if x.ndim else 'none'}: row i of each is one image and its "
                                 f"{'caption' if name == 'text_features' else 'own'}")
        width = image_features.shape[1]
        for name, x in features.items():
            if x.shape[1] != width:
                raise UsageError(f"{loss}: {name} has dimension {x.shape[1]} and image_features {width}: both towers' "
                                 "features, in the joint embedding space")
        for name, x in {**features, **(per_image or {}), **given}.items():
            if isinstance(x, torch.Tensor) and x.device != image_features.device:
                raise UsageError(f"{loss}: {name} is on {x.device} and image_features on {image_features.device}")
        for name, x in indices.items():
            of = f"{name.split('_')[0]}_features"  # concept_image: concept_features; relation_ends: relation_features
            if of not in features:
                raise UsageError(f"{loss}: {name} is given without {of}, whose rows it indexes")
            if x.dtype not in (torch.long, torch.int):
                raise UsageError(f"{loss}: {name} is of dtype {x.dtype}: indices are torch.long (or torch.int)")
            if x.ndim != (2 if name == "relation_ends" else 1) or x.shape[0] != features[of].shape[0]:
                raise UsageError(f"{loss}: {name} has shape {tuple(x.shape)} and {of} {features[of].shape[0]} rows: "
                                 "one index to a row")
        if self.read_indices and indices:
            check_index_values(loss, image_features.shape[0], indices)


def check_index_values(loss: str, images: int, indices: dict[str, torch.Tensor]) -> None:
    """Refuse an index outside its range: an `X_image` outside this rank's `images` rows, a `relation_ends` outside the
    nodes of its relation's image. Every range is judged on the device and read back in one transfer; the value that
    fails, only then."""
    last = images - 1
    bounds = {name: torch.full_like(x, images) for name, x in indices.items() if name != "relation_ends"}
    if "relation_ends" in indices:
        owners = indices["node_image"].clamp(0, last)  # an owner out of range is named first, as its own argument
        nodes = owners.new_zeros(images).index_add_(0, owners, torch.ones_like(owners))
        bounds["relation_ends"] = nodes[indices["relation_image"].clamp(0, last)][:, None].expand_as(indices["relation_ends"])
    outside = {name: (x < 0) | (x >= bounds[name]) for name, x in indices.items()}
    flags = torch.stack([o.any() for o in outside.values()]).tolist()
    name = next((n for n, bad in zip(outside, flags, strict=True) if bad), None)
    if name is None:
        return
    at = outside[name].nonzero()[0]
    value, bound = int(indices[name][tuple(at)]), int(bounds[name][tuple(at)])
    if name == "relation_ends":
        raise UsageError(f"{loss}: relation_ends holds {value} where its relation's image has {bound} node_features rows: "
                         f"indices 0 to {bound - 1} among them")
    raise UsageError(f"{loss}: {name} holds {value} and image_features has {images} rows: indices 0 to {last} of this "
                     "rank's images")
