"""open_clip's training view of images held decoded in an array, made for a whole batch at once.

open_clip's training transform is `RandomResizedCrop` (bicubic, through PIL), `ToTensor` and `Normalize`, image by
image in the DataLoader workers: about 0.45 ms an image on this project's CPUs, on the cores the binding world's model
needs. `BatchedView` draws the same crop box per image (torchvision's `get_params` rule, from the reader's per-sample
seed) and resamples the batch with PIL's own fixed-point bicubic arithmetic (Pillow's `Resample.c`: `precompute_coeffs`,
`normalize_coeffs_8bpc`, a horizontal then a vertical pass rounded to 8 bits), so the views are bit for bit
torchvision's, in 1.3-1.9× less time (`benchmarks/batched_view.py`).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

PRECISION_BITS = 32 - 8 - 2  # Pillow's fixed point for 8-bit images
BICUBIC_SUPPORT = 2.0
TRIES = 10  # torchvision's get_params draws up to 10 boxes before its central fallback


def bicubic(x: torch.Tensor) -> torch.Tensor:
    """Pillow's bicubic filter (a = -0.5), in float64."""
    a = -0.5
    x = x.abs()
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return torch.where(x < 1.0, near, torch.where(x < 2.0, far, torch.zeros_like(x)))


@functools.lru_cache(maxsize=1024)
def resample_taps(in_size: int, out_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pillow's `precompute_coeffs` and `normalize_coeffs_8bpc` for `in_size` pixels resized to `out_size`: (first source
    pixel of each output pixel (out,), int32 weights (out, K)), K = 2 ⌈support⌉ + 1 as Pillow's."""
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = BICUBIC_SUPPORT * filterscale
    taps = math.ceil(support) * 2 + 1
    center = (torch.arange(out_size, dtype=torch.float64) + 0.5) * scale
    first = (center - support + 0.5).trunc().clamp_min(0)  # C's (int) cast truncates
    count = (center + support + 0.5).trunc().clamp_max(in_size) - first
    k = torch.arange(taps, dtype=torch.float64)
    weights = bicubic((k + first[:, None] - center[:, None] + 0.5) / filterscale)
    weights = torch.where(k < count[:, None], weights, torch.zeros_like(weights))
    total = weights.sum(-1, keepdim=True)
    weights = torch.where(total != 0, weights / total, weights)
    fixed = (weights * (1 << PRECISION_BITS) + torch.where(weights < 0, -0.5, 0.5)).trunc()
    return first.long(), fixed.int()


def resample_axis(pixels: torch.Tensor, start: torch.Tensor, size: torch.Tensor, out_size: int) -> torch.Tensor:
    """One pass of Pillow's 8-bit resampling along axis 1 of `pixels` (int32 (B, L, F)): for each image, the span
    [start, start + size) of that axis resized to `out_size`, rounded and clipped to 8 bits: (B, out_size, F)."""
    batch, length, _ = pixels.shape
    taps = [resample_taps(n, out_size) for n in size.tolist()]
    k = max(w.shape[1] for _, w in taps)
    first = torch.stack([f for f, _ in taps])  # (B, out)
    weights = torch.stack([torch.nn.functional.pad(w, (0, k - w.shape[1])) for _, w in taps])  # (B, out, K)
    rows = (start[:, None, None] + first[..., None] + torch.arange(k)).clamp(max=length - 1)  # a tap past the span weighs 0
    rows += torch.arange(batch)[:, None, None] * length
    flat = pixels.reshape(batch * length, -1)
    acc = torch.full((batch, out_size, flat.shape[1]), 1 << (PRECISION_BITS - 1), dtype=torch.int32)
    for j in range(k):
        acc.addcmul_(flat.index_select(0, rows[..., j].reshape(-1)).view_as(acc), weights[..., j, None])
    return (acc >> PRECISION_BITS).clamp_(0, 255)  # Pillow's clip8


class BatchedView:
    """open_clip's `RandomResizedCrop` + `ToTensor` + `Normalize`, split in two: `sample` (per image, in the reader) keeps
    the image as uint8 and draws its crop box; `batch` makes every view of a batch at once."""

    def __init__(self, size: int, scale: Sequence[float], ratio: Sequence[float], mean: Sequence[float], std: Sequence[float]):
        self.size, self.scale, self.ratio = size, tuple(scale), tuple(ratio)
        self.mean = torch.tensor(mean, dtype=torch.float32)[:, None, None]
        self.std = torch.tensor(std, dtype=torch.float32)[:, None, None]

    @classmethod
    def of(cls, transform: Callable) -> BatchedView | None:
        """The batched form of open_clip's training transform `transform`, or None where it does more than crop and
        normalise (colour jitter, grey scale, timm's augmentations) or crops otherwise."""
        from open_clip import transform as oc
        from torchvision.transforms import InterpolationMode, Normalize, RandomResizedCrop, ToTensor

        steps = getattr(transform, "transforms", None)
        if steps is None or len(steps) != 4:
            return None
        kinds = [type(t) for t in steps]
        newer = kinds == [RandomResizedCrop, getattr(oc, "MaybeConvertMode", None), getattr(oc, "MaybeToTensor", None), Normalize]
        older = steps[1] is getattr(oc, "_convert_to_rgb", None) and kinds[::2] == [RandomResizedCrop, Normalize] and kinds[2] is ToTensor
        if not (newer or older):  # open_clip 3.3's steps, or those of 3.2 and before (a function converting to RGB, ToTensor)
            return None
        crop, _, _, normalize = steps
        if crop.interpolation != InterpolationMode.BICUBIC or crop.size[0] != crop.size[1]:
            return None
        return cls(crop.size[0], crop.scale, crop.ratio, normalize.mean, normalize.std)

    def box(self, uniforms: Sequence[float], height: int, width: int) -> tuple[int, int, int, int]:
        """(top, left, height, width) by torchvision's `RandomResizedCrop.get_params`, from 2 × TRIES + 2 uniforms in [0, 1)."""
        area = height * width
        low, high = math.log(self.ratio[0]), math.log(self.ratio[1])
        for t in range(TRIES):
            target = area * (self.scale[0] + (self.scale[1] - self.scale[0]) * uniforms[2 * t])
            aspect = math.exp(low + (high - low) * uniforms[2 * t + 1])
            w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                top = int(uniforms[-2] * (height - h + 1))
                return top, int(uniforms[-1] * (width - w + 1)), h, w
        in_ratio = width / height  # torchvision's fallback: the central crop of the nearest allowed aspect
        if in_ratio < min(self.ratio):
            w, h = width, round(width / min(self.ratio))
        elif in_ratio > max(self.ratio):
            h, w = height, round(height * max(self.ratio))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    reads_arrays = True  # a reader hands it decoded arrays as they are, not as PIL images

    def __call__(self, image: np.ndarray) -> dict[str, Any]:
        """An image's share of the work, in the reader: the uint8 pixels and its crop box, drawn from torch's generator
        (which the reader seeds per sample)."""
        uniforms = torch.rand(2 * TRIES + 2, dtype=torch.float64).tolist()
        return {"image": torch.from_numpy(np.array(image, dtype=np.uint8)), "crop": self.box(uniforms, *image.shape[:2])}

    def batch(self, images: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        """The views (B, 3, size, size), float32 normalised, of uint8 images (B, H, W, 3) cropped at `boxes` (B, 4) of
        (top, left, height, width) and resized as PIL resizes a crop: horizontally, then vertically."""
        top, left, height, width = boxes.long().unbind(1)
        batch, rows, _, channels = images.shape
        pixels = images.permute(0, 2, 3, 1).reshape(batch, -1, channels * rows).int()  # (B, W, C·H)
        pixels = resample_axis(pixels, left, width, self.size)  # (B, size, C·H)
        pixels = pixels.view(batch, self.size, channels, rows).permute(0, 3, 2, 1).reshape(batch, rows, -1)  # (B, H, C·size)
        pixels = resample_axis(pixels, top, height, self.size)  # (B, size, C·size)
        views = pixels.view(batch, self.size, channels, self.size).permute(0, 2, 1, 3).float().div(255)
        return views.sub_(self.mean).div_(self.std).contiguous()
