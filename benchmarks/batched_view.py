"""The training view of decoded arrays: open_clip's transform image by image against `BatchedView` a batch at once.

    python benchmarks/batched_view.py [--batch 64] [--batches 20] [--threads 1]

Data: --batch × --batches images of the binding world's size (64 px, random pixels; the work does not depend on them).
Each side makes every view from the uint8 array, as a DataLoader worker does (one thread, as torch gives a worker):
open_clip's `RandomResizedCrop` + `ToTensor` + `Normalize` through PIL per image, against `BatchedView`'s per-image box and
per-batch resampling. The boxes are drawn once and given to both, so the views must be equal bit for bit; the script
checks that, then prints each side's time per image and the ratio.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torchvision.transforms.functional as TF
from PIL import Image

from compclip.data.augment import BatchedView
from compclip.demo import MODEL
from compclip.models import load_model, train_preprocess


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, _, _ = load_model(MODEL)
    transform = train_preprocess(model)
    view = BatchedView.of(transform)
    crop, convert, to_tensor, normalize = transform.transforms
    n = args.batch * args.batches
    images = np.random.default_rng(0).integers(0, 256, (n, view.size, view.size, 3), dtype=np.uint8)
    torch.manual_seed(0)
    boxes = [view(image)["crop"] for image in images]

    start = time.perf_counter()
    reference = [normalize(to_tensor(convert(TF.resized_crop(Image.fromarray(image), *box, list(crop.size), crop.interpolation))))
                 for image, box in zip(images, boxes, strict=True)]
    per_image = (time.perf_counter() - start) / n

    start = time.perf_counter()
    batched = []
    for b in range(args.batches):
        part = slice(b * args.batch, (b + 1) * args.batch)
        samples = [view(image) for image in images[part]]  # the reader's share (its boxes are drawn again, then replaced)
        batched.append(view.batch(torch.stack([s["image"] for s in samples]), torch.tensor(boxes[part])))
    per_batch = (time.perf_counter() - start) / n

    assert torch.equal(torch.cat(batched), torch.stack(reference)), "the batched views differ from open_clip's"
    print(f"{n} views of {view.size} px, batches of {args.batch}, {args.threads} thread(s): identical bit for bit")
    print(f"open_clip image by image: {per_image * 1e6:.0f} us an image")
    print(f"BatchedView:              {per_batch * 1e6:.0f} us an image")
    print(f"ratio: {per_image / per_batch:.1f}x")


if __name__ == "__main__":
    main()
