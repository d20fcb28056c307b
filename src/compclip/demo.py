"""`compclip demo`: a real end-to-end smoke run of what the toolkit has today.

It writes a small captioned image set as a webdataset shard (with one truncated JPEG and
one empty caption planted), streams it through the reader into `compclip-tiny-siglip`,
fine-tunes with open_clip's SigLIP loss, measures caption retrieval before and after,
saves a checkpoint, reloads it and checks the outputs are bit-identical, then exports it
and checks plain open_clip gives the same embeddings.
"""
from __future__ import annotations

import io
import random
import time
from pathlib import Path

import torch
from PIL import Image, ImageDraw

COLOURS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 70, 220), "yellow": (230, 210, 40)}
SHAPES = ("square", "circle", "triangle")
MODEL = "compclip-tiny-siglip"
LR = 3e-4


def _draw(colour: str, shape: str, rng: random.Random, size: int = 64) -> Image.Image:
    img = Image.new("RGB", (size, size), tuple(rng.randrange(90, 160) for _ in range(3)))
    d = ImageDraw.Draw(img)
    s = rng.randrange(size // 3, size // 2)
    x, y = rng.randrange(2, size - s - 2), rng.randrange(2, size - s - 2)
    fill = COLOURS[colour]
    if shape == "square":
        d.rectangle([x, y, x + s, y + s], fill=fill)
    elif shape == "circle":
        d.ellipse([x, y, x + s, y + s], fill=fill)
    else:
        d.polygon([(x, y + s), (x + s, y + s), (x + s // 2, y)], fill=fill)
    return img


def write_shard(path: Path, n: int, seed: int) -> tuple[int, int]:
    """Write `n` records; returns the indices of the planted corrupt image and empty caption."""
    import webdataset as wds

    rng = random.Random(seed)
    corrupt, empty = 3, 7
    path.parent.mkdir(parents=True, exist_ok=True)
    with wds.TarWriter(str(path)) as sink:
        for i in range(n):
            colour, shape = rng.choice(list(COLOURS)), rng.choice(SHAPES)
            buf = io.BytesIO()
            _draw(colour, shape, rng).save(buf, "JPEG", quality=90)
            data = buf.getvalue()
            sink.write({
                "__key__": f"{i:06d}",
                "jpg": data[: len(data) // 3] if i == corrupt else data,
                "txt": " " if i == empty else f"a {colour} {shape}",
            })
    return corrupt, empty


@torch.no_grad()
def caption_accuracy(model, tokenizer, images: torch.Tensor, captions: list[str]) -> float:
    """Fraction of images whose best-scoring caption among all distinct captions is their own."""
    names = sorted(set(captions))
    img = torch.nn.functional.normalize(model.encode_image(images), dim=-1)
    txt = torch.nn.functional.normalize(model.encode_text(tokenizer(names)), dim=-1)
    best = (img @ txt.T).argmax(1)
    return sum(names[b] == c for b, c in zip(best.tolist(), captions)) / len(captions)


def run_demo(out: Path, steps: int = 150, seed: int = 0, n: int = 256) -> dict[str, float]:
    import open_clip
    from rich.console import Console
    from rich.table import Table

    from .data import WebDatasetReader
    from .models import export_open_clip, load_model, save_checkpoint, train_preprocess
    from .progress import progress

    console = Console()
    t0 = time.time()
    torch.manual_seed(seed)
    shard = Path(out) / "data" / "shapes-000000.tar"
    write_shard(shard, n, seed)
    console.print(f"wrote {n} records to {shard} (one truncated JPEG and one empty caption planted)")

    model, preprocess, tokenizer = load_model(MODEL)
    reader = WebDatasetReader(str(shard), transform=preprocess)
    samples = list(reader)
    reader.skips.log_summary()
    images = torch.stack([s["image"] for s in samples])
    captions = [s["caption"] for s in samples]
    before = caption_accuracy(model.eval(), tokenizer, images, captions)

    train_reader = WebDatasetReader(str(shard), transform=train_preprocess(model))
    loader = torch.utils.data.DataLoader(train_reader, batch_size=32, num_workers=2, drop_last=True)
    loss_fn = open_clip.loss.SigLipLoss()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    model.train()

    def batches():
        while True:
            yield from loader

    stream = batches()
    for _ in progress(range(steps), "fine-tuning", total=steps, unit="step"):
        batch = next(stream)
        image_features, text_features, logit_scale, logit_bias = model(batch["image"], tokenizer(batch["caption"]))
        loss = loss_fn(image_features, text_features, logit_scale, logit_bias)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    after = caption_accuracy(model, tokenizer, images, captions)

    ckpt = save_checkpoint(model, Path(out) / "checkpoint", method="siglip", train_args={"steps": steps, "lr": LR, "seed": seed})
    reloaded, _, _ = load_model(str(ckpt))
    probe_img, probe_txt = images[:8], tokenizer(captions[:8])
    with torch.no_grad():
        same_ckpt = torch.equal(model.encode_image(probe_img), reloaded.encode_image(probe_img)) and torch.equal(
            model.encode_text(probe_txt), reloaded.encode_text(probe_txt)
        )
        exported = Path(out) / "export.safetensors"
        export_open_clip(ckpt, exported)
        plain, _, _ = open_clip.create_model_and_transforms(MODEL, pretrained=str(exported))
        same_export = torch.equal(model.encode_image(probe_img), plain.eval().encode_image(probe_img))

    table = Table(title=f"compclip demo ({MODEL}, {steps} SigLIP steps)")
    for col in ("check", "result"):
        table.add_column(col)
    stats = reader.stats()
    table.add_row("records read / skipped", f"{stats['read']} / {stats['skipped']} (corrupt image {stats['corrupt_image']}, empty caption {stats['empty_caption']})")
    table.add_row("caption accuracy before", f"{before:.1%} (chance {1 / len(set(captions)):.1%})")
    table.add_row("caption accuracy after", f"{after:.1%}")
    table.add_row("checkpoint reload bit-identical", str(same_ckpt))
    table.add_row("open_clip loads export, same output", str(same_export))
    table.add_row("wall time", f"{time.time() - t0:.1f} s")
    console.print(table)
    if not (same_ckpt and same_export):
        raise SystemExit("demo failed: checkpoint or export does not reproduce the model")
    return {"before": before, "after": after, **stats}
