"""`compclip train` beside `open_clip_train.main` on the same shards, model, batch, precision and workers.

    python benchmarks/train_vs_open_clip_train.py                     # CPU: the tiny models, then ViT-B-16 at batch 8
    python benchmarks/train_vs_open_clip_train.py --device cuda --models ViT-B-16,bench-ViT-B-16-map --batch 256 \\
        --precision amp_bf16 --workers 12 --steps 48 --samples 4000 --shards shards/

Both sides run as their users run them, each in a process of its own: `open_clip_train.main` (its `--siglip` for the
sigmoid loss) and `compclip train` (`--method clip` or `siglip`, and any other `--methods`), from random initialisation,
`--dataset-resampled`, AdamW (β 0.9/0.98, ε 1e-6, wd 0.2, as open_clip_train's defaults), a log line every step.
Per-step samples/s is the median after the first 5 steps (open_clip_train's log line; compclip's `log.jsonl`
`samples_per_second`); peak memory is `torch.cuda.max_memory_allocated()` at the process's exit (CUDA only). Beside them:

- the floor, the model's own step in this process: forward, open_clip's `ClipLoss`/`SigLipLoss`, backward, a fused
  AdamW step, the batch already on the device;
- each method's step in phases, timed with `torch.cuda.Event` on a GPU (on a CPU every phase ends in its own time): data
  wait, image tower, text tower (every call: captions, negatives, graph texts), the rest of the forward pass, loss,
  backward, optimizer, logging; the loop's parts (`Trainer`'s model, method, loader and optimizer), each phase called as
  the loop calls it; the medians, and the three slowest steps phase by phase;
- each compclip run's mean wait for data a step (`log.jsonl`'s `data_time`);
- what bounds each method (`--parts bounds`): its loader drained alone, and its step alone on batches already on the
  device: one batch over and over, then a new batch of the loader's each step, with the text tower's rows as given and
  padded as training pads them on a GPU (shapes that change from step to step, as negatives' and scene graphs' counts
  do, cost what the first two differ by; the padding saves what the last two do).

`--parts` picks among `sides` (both entry points and the floor), `phases` and `bounds`; all three by default.
`--profile METHODS` runs 3 of those methods' phase steps under torch.profiler and prints the operators that took the
most device time.

The shards are the 1,000 shipped Flickr photos resized to 256 px on the short side (as img2dataset stores them) with
their first caption, repeated to `--samples` in 8 webdataset shards; `--shards DIR` reuses (or writes) them there, so a
GPU machine that has only the checkout can be handed them. `bench-ViT-B-16-map` is ViT-B-16-SigLIP's architecture (MAP
head, no causal mask) and `bench-tiny-map` compclip-tiny-siglip's, each with open_clip's own tokenizer, registered in
each process from a config the script writes: a name holding "siglip" makes open_clip's tokenizer ask the hub for
SigLIP's vocabulary.

Each model writes `benchmarks/results/train_vs_open_clip_train-<device>-<model>-<precision>-b<batch>[-<parts>].json`
(device, versions, commit, every figure) and prints a table row per method; docs/benchmarks.md keeps the tables.
"""
from __future__ import annotations

import argparse
import atexit
import contextlib
import csv
import io
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLICKR = ROOT.parent / "shared" / "data" / "flickr8k_1k"
RESULTS = ROOT / "benchmarks" / "results"
# SigLIP's architectures with open_clip's own tokenizer (a name holding "siglip" makes open_clip_train ask the hub for
# SigLIP's vocabulary): the name each is registered under, and the config it copies
MAP_MODELS = {"bench-ViT-B-16-map": "ViT-B-16-SigLIP", "bench-tiny-map": "compclip-tiny-siglip"}
WARMUP = 5  # steps left out of each median
PARTS = ("sides", "phases", "bounds")


# ---- the shards ----------------------------------------------------------------------------------------------------

def first_captions() -> dict[str, str]:
    """Each shipped photo's first caption, by file name."""
    with open(FLICKR / "captions.csv", newline="") as f:
        first: dict[str, str] = {}
        for row in csv.DictReader(f):
            first.setdefault(row["image"], row["caption"].strip())
    return first


def write_shards(folder: Path, samples: int, shards: int = 8) -> str:
    """The shipped photos at 256 px on the short side with their first caption, repeated to `samples` (kept if there)."""
    import webdataset as wds
    from PIL import Image

    pattern = str(folder / f"flickr-{{000..{shards - 1:03d}}}.tar")
    done = folder / f"done-{samples}"
    if done.is_file():
        return pattern
    encoded = []
    for name, caption in first_captions().items():
        img = Image.open(FLICKR / "images" / name).convert("RGB")
        scale = 256 / min(img.size)
        img = img.resize((round(img.width * scale), round(img.height * scale)), Image.BICUBIC)
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=95)
        encoded.append((buf.getvalue(), caption))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    per_shard = -(-samples // shards)
    for s in range(shards):
        with wds.TarWriter(str(folder / f"flickr-{s:03d}.tar")) as sink:
            for i in range(s * per_shard, min(samples, (s + 1) * per_shard)):
                jpg, caption = encoded[i % len(encoded)]
                sink.write({"__key__": f"{i:07d}", "jpg": jpg, "txt": caption.encode()})
    done.touch()
    return pattern


def write_map_configs(folder: Path) -> Path:
    """`MAP_MODELS`: SigLIP's architectures with open_clip's tokenizer, as a folder `open_clip.add_model_config` reads."""
    import open_clip

    import compclip.models.bundled  # noqa: F401  (the tiny models' configs)

    folder.mkdir(parents=True, exist_ok=True)
    for name, source in MAP_MODELS.items():
        cfg = json.loads(json.dumps(open_clip.get_model_config(source)))
        text = cfg["text_cfg"]
        for key in ("hf_tokenizer_name", "tokenizer_kwargs"):
            text.pop(key, None)
        text["vocab_size"] = 49408
        (folder / f"{name}.json").write_text(json.dumps(cfg, indent=2))
    return folder


# ---- one side, in a process of its own -------------------------------------------------------------------------------

def child(side: str, argv: list[str]) -> None:
    """Run one side's entry point as its user would, with the benchmark's model configs registered and the peak memory
    written at exit."""
    import open_clip
    import torch

    import compclip.models.bundled  # noqa: F401  (registers the tiny models with open_clip and timm, for both sides)

    if os.environ.get("BENCH_CONFIGS"):
        open_clip.add_model_config(os.environ["BENCH_CONFIGS"])
    peak_file = os.environ.get("BENCH_PEAK")
    if peak_file and torch.cuda.is_available():
        atexit.register(lambda: Path(peak_file).write_text(str(torch.cuda.max_memory_allocated())))
    if side == "open_clip_train":
        import open_clip_train.data as data
        import webdataset as wds
        from open_clip_train.main import main

        if int(wds.__version__.split(".")[0]) >= 1:  # its own tar reader expects webdataset < 1.0's samples ("fname")
            data.tarfile_to_samples_nothrow = wds.tarfile_to_samples(handler=data.log_and_continue)
        main(argv)
    else:
        from compclip.cli import main

        sys.exit(main(argv))


def run_side(side: str, argv: list[str], configs: Path, scratch: Path, log: Path) -> dict:
    peak = scratch / f"peak-{side}"
    peak.unlink(missing_ok=True)
    env = {**os.environ, "BENCH_CONFIGS": str(configs), "BENCH_PEAK": str(peak), "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    with open(log, "w") as out:
        done = subprocess.run([sys.executable, __file__, "--child", side, "--", *argv], env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        raise SystemExit(f"{side} failed ({done.returncode}): see {log}\n" + log.read_text()[-3000:])
    return {"wall_s": time.perf_counter() - start, "peak_mib": int(peak.read_text()) / 2**20 if peak.is_file() else None}


def common(args, model: str) -> dict:
    return {"model": model, "batch": args.batch, "precision": args.precision, "workers": args.workers, "steps": args.steps}


def open_clip_train_run(args, model: str, siglip: bool, shards: str, configs: Path, scratch: Path) -> dict:
    logs = scratch / "oc-logs"
    shutil.rmtree(logs, ignore_errors=True)
    argv = ["--train-data", shards, "--train-num-samples", str(args.steps * args.batch), "--dataset-type", "webdataset",
            "--dataset-resampled", "--batch-size", str(args.batch), "--precision", args.precision, "--workers", str(args.workers),
            "--model", model, "--lr", "1e-4", "--wd", "0.2", "--warmup", "0", "--epochs", "1", "--log-every-n-steps", "1",
            "--logs", str(logs), "--name", "run", "--save-frequency", "0", "--report-to", "", "--seed", "0",
            "--device", args.device, *(["--siglip"] if siglip else [])]
    side = run_side("open_clip_train", argv, configs, scratch, scratch / "open_clip_train.log")
    rates = [float(r) for r in re.findall(r"Batch \(t\): [\d.]+, ([\d.]+)/s", (logs / "run" / "out.log").read_text())]
    return {**side, "per_step": rates, "samples_per_s": statistics.median(rates[WARMUP:] or rates)}


def concept_store(method: str, captions: list[str], scratch: Path) -> list[str]:
    """`--concepts` for a method that reads concepts: a store of the shards' captions with the fields it reads."""
    from compclip.concepts import build_store
    from compclip.methods import method_concept_fields

    fields = method_concept_fields(method)
    if not fields:
        return []
    out = scratch / f"concepts-{'-'.join(fields)}"
    if not out.is_dir():
        build_store(captions, out, fields)
    return ["--concepts", str(out)]


def compclip_run(args, model: str, method: str, shards: str, configs: Path, scratch: Path, captions: list[str]) -> dict:
    out = scratch / f"cc-{method}"
    shutil.rmtree(out, ignore_errors=True)
    argv = ["-q", "train", "--method", method, *concept_store(method, captions, scratch), "--model", model, "--train-data", shards,
            "--dataset-resampled",
            "--batch-size", str(args.batch), "--precision", args.precision, "--workers", str(args.workers), "--steps", str(args.steps),
            "--lr", "1e-4", "--optimizer", "adamw", "--beta2", "0.98", "--eps", "1e-6", "--wd", "0.2", "--log-every", "1",
            "--save-every", str(10 * args.steps), "--out", str(out), "--device", args.device]
    side = run_side("compclip", argv, configs, scratch, scratch / f"compclip-{method}.log")
    steps = [r for r in map(json.loads, (out / "log.jsonl").read_text().splitlines()) if "samples_per_second" in r]
    rates, waits = [r["samples_per_second"] for r in steps], [r["data_time"] for r in steps]
    return {**side, "per_step": rates, "samples_per_s": statistics.median(rates[WARMUP:] or rates), "data_time_per_step": waits,
            "data_wait_ms": 1e3 * statistics.mean(waits[WARMUP:] or waits)}


# ---- in this process: the floor and compclip's step in phases ---------------------------------------------------------

class Clock:
    """Marks between phases: CUDA events on a GPU (read once at the end), the wall clock after a sync elsewhere."""

    def __init__(self, device):
        import torch

        self.torch, self.cuda = torch, device.type == "cuda"
        self.marks: list[tuple[str, object]] = []

    def mark(self, name: str) -> None:
        if self.cuda:
            event = self.torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append((name, event))
        else:
            self.marks.append((name, time.perf_counter()))

    def phases(self) -> dict[str, float]:
        """Milliseconds from each mark to the next, by the later mark's name."""
        if self.cuda:
            self.torch.cuda.synchronize()
        out: dict[str, float] = {}
        for (_, a), (name, b) in zip(self.marks, self.marks[1:], strict=False):
            ms = a.elapsed_time(b) if self.cuda else (b - a) * 1e3
            out[name] = out.get(name, 0.0) + ms
        return out


def floor_run(args, model_name: str, siglip: bool, captions: list[str]) -> dict:
    """The model's own step: open_clip's forward and loss, backward, fused AdamW; the batch already on the device."""
    import open_clip
    import torch
    from open_clip.loss import ClipLoss, SigLipLoss
    from open_clip_train.precision import get_autocast

    device = torch.device(args.device)
    torch.manual_seed(0)
    model = open_clip.create_model(model_name, device=device, init_logit_bias=-10 if siglip else None, output_dict=True).train()
    tokenizer = open_clip.get_tokenizer(model_name)
    size = model.visual.image_size if isinstance(model.visual.image_size, tuple) else (model.visual.image_size,) * 2
    images = torch.randn(args.batch, 3, *size, device=device)
    text = tokenizer([captions[i % len(captions)] for i in range(args.batch)]).to(device)
    loss_fn = SigLipLoss() if siglip else ClipLoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.2,
                                  fused=device.type in ("cuda", "cpu"))
    autocast = get_autocast(args.precision, device_type=device.type)
    rates = []
    for _ in range(args.steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            out = model(images, text)
            loss = loss_fn(out["image_features"], out["text_features"], out["logit_scale"],
                           *([out["logit_bias"]] if siglip else []))
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        rates.append(args.batch / (time.perf_counter() - start))
    return {"per_step": rates, "samples_per_s": statistics.median(rates[WARMUP:] or rates)}


def in_process_config(args, model: str, method: str, shards: str, out: Path, concepts: str | None = None):
    """The options `compclip_run` gives the command line, as a `TrainConfig` for a `Trainer` in this process, whose
    `out` is emptied first (each part starts a run of its own there)."""
    from compclip.train import TrainConfig

    shutil.rmtree(out, ignore_errors=True)
    return TrainConfig(method=method, model=model, train_data=shards, dataset_resampled=True, batch_size=args.batch,
                       precision=args.precision, workers=args.workers, steps=args.steps, lr=1e-4, optimizer="adamw",
                       betas=(0.9, 0.98), eps=1e-6, weight_decay=0.2, out=str(out), device=args.device, concepts=concepts)


def phase_run(args, model: str, method: str, shards: str, scratch: Path, captions: list[str]) -> dict:
    """compclip's step through the loop's own parts, each phase marked: the medians over the steps after the warm-up and
    every step's phases (a slow step shows where its time went: waiting for data, or in one of the phases).

    The towers are marked by hooks on their modules, every call of each: `model.visual` (the image tower where a method
    calls it whole; a timm tower reached through its trunk, as C2LIP's tokens are, counts as "forward, other") and the
    text transformer (captions, negatives, graph texts). "forward, other" is the rest of the forward pass, the parts' own
    work."""

    import torch

    from compclip.train.step import merge_micro
    from compclip.train.trainer import Trainer

    concepts = concept_store(method, captions, scratch)
    trainer = Trainer(in_process_config(args, model, method, shards, scratch / f"phases-{method}", concepts[1] if concepts else None))
    state, model_, method_ = trainer.state, trainer.model, trainer.method
    method_.distribute(0, 1)
    text_tower = model_.transformer if hasattr(model_, "transformer") else model_.text
    clock = None

    def mark(name: str):
        return lambda *_: clock.mark(name)

    hooks = [model_.visual.register_forward_pre_hook(mark("forward, other")), model_.visual.register_forward_hook(mark("image tower")),
             text_tower.register_forward_pre_hook(mark("forward, other")), text_tower.register_forward_hook(mark("text tower"))]
    batches = trainer._batches()
    per_step: dict[int, dict[str, float]] = {}  # step: its phases, the profiled steps left out
    profiled = method in args.profile.split(",")
    device = trainer.env.device
    profiler = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, *([torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])],
        schedule=torch.profiler.schedule(wait=WARMUP - 1, warmup=1, active=3, repeat=1),
        on_trace_ready=lambda done: print_profile(model, method, done, device.type)) if profiled else contextlib.nullcontext()
    with profiler:
        for step in range(1, args.steps + 1):
            clock = Clock(device)
            clock.mark("start")
            batch = next(batches)
            clock.mark("data wait")
            state.method.begin_step(state.step)
            state.optimizer.zero_grad(set_to_none=True)
            with trainer._autocast():
                out = state.module(batch)
                clock.mark("forward, other")
                terms = method_(merge_micro([out], 0, method_.output_kinds))
                total = sum(terms.values())
            clock.mark("loss")
            state.scaler.scale(total).backward()
            clock.mark("backward")
            state.scaler.step(state.optimizer)
            state.scaler.update()
            state.scheduler.step()
            clock.mark("optimizer")
            {name: float(t.detach()) for name, t in terms.items()}  # what the loop logs
            clock.mark("logging")
            if not (profiled and WARMUP < step <= WARMUP + 3):  # the profiler's own cost kept out of the phases
                per_step[step] = clock.phases()
            if profiled:
                profiler.step()
    batches.close()
    for hook in hooks:
        hook.remove()
    kept = [p for step, p in per_step.items() if step > WARMUP] or list(per_step.values())
    names = list(dict.fromkeys(name for p in per_step.values() for name in p))
    return {"median_ms": {name: statistics.median(p.get(name, 0.0) for p in kept) for name in names}, "per_step_ms": per_step}


def print_profile(model: str, method: str, profiler, device_type: str) -> None:
    """The 15 operators of `profiler`'s 3 steps that took the most device time (CPU time on a CPU)."""
    key = "self_device_time_total" if device_type == "cuda" else "self_cpu_time_total"
    print(f"{model} {method}: 3 steps under torch.profiler, by {key}")
    print(profiler.key_averages().table(sort_by=key, row_limit=15, max_name_column_width=60))


def print_phases(model: str, method: str, phases: dict) -> None:
    """The median phases of a method's step, then its three slowest steps after the warm-up, phase by phase."""
    print(f"{model} {method}, phases of compclip's step (ms, median): " + ", ".join(f"{k} {v:.1f}" for k, v in phases["median_ms"].items()))
    steps = [(step, p) for step, p in phases["per_step_ms"].items() if step > WARMUP]
    for step, p in sorted(steps, key=lambda s: -sum(s[1].values()))[:3]:
        print(f"  step {step}: {sum(p.values()):.1f} ms: " + ", ".join(f"{k} {v:.1f}" for k, v in p.items()))


def bounds_run(args, model: str, method: str, shards: str, scratch: Path, captions: list[str]) -> dict:
    """What bounds a method's step: the trainer's loader drained alone (no model work), and the loop's step alone on
    batches already on the device (`loss_step` and the optimizer, as `train_loop` calls them): one batch over and over,
    then a batch of the loader's each step (`args.steps` of them, whose negatives and graph texts come in a different count
    each, as a run's do), first with the text tower's rows as given, then padded on a GPU as training pads them
    (`models.tokens.GPU_ROWS`). A cost of a new shape each step shows between the first two, what the padding saves of it
    between the last two. Also the first batch's tensor shapes (how many texts, at what width)."""
    import torch

    from compclip.models import tokens
    from compclip.train.step import loss_step
    from compclip.train.trainer import Trainer

    concepts = concept_store(method, captions, scratch)
    trainer = Trainer(in_process_config(args, model, method, shards, scratch / f"bounds-{method}", concepts[1] if concepts else None))
    state, env = trainer.state, trainer.env
    batches = trainer._batches()
    first = next(batches)
    # every worker started its first batch together: from the first arrival, 3 more rounds of all the workers' batches
    rounds = 3 * max(1, args.workers)
    start = time.perf_counter()
    for _ in range(rounds):
        next(batches)
    data_rate = rounds * args.batch / (time.perf_counter() - start)
    held = [first, *(next(batches) for _ in range(args.steps - 1))]
    batches.close()
    shapes = {k: list(v.shape) for k, v in first.items() if isinstance(v, torch.Tensor)} | {"widths": first.get("widths")}

    def step_alone(batch_of) -> float:
        rates = []
        for i in range(args.steps):
            started = time.perf_counter()
            state.method.begin_step(state.step)
            state.optimizer.zero_grad(set_to_none=True)
            loss_step(state.module, state.method, [batch_of(i)], env, trainer._autocast, lambda loss: state.scaler.scale(loss).backward())
            state.scaler.step(state.optimizer)
            state.scaler.update()
            if env.device.type == "cuda":
                torch.cuda.synchronize()
            rates.append(args.batch / (time.perf_counter() - started))
        return statistics.median(rates[WARMUP:] or rates)

    figures = {"data_alone_samples_per_s": data_rate, "step_alone_samples_per_s": step_alone(lambda i: first)}
    padded_to, tokens.GPU_ROWS = tokens.GPU_ROWS, 1  # the rows as given: every count of texts a shape of its own
    try:
        figures["step_alone_new_batches_samples_per_s"] = step_alone(lambda i: held[i])
    finally:
        tokens.GPU_ROWS = padded_to
    figures["step_alone_new_batches_padded_samples_per_s"] = step_alone(lambda i: held[i])
    return {**figures, "padded_to": padded_to, "shapes": shapes}


def versions() -> dict:
    import open_clip
    import torch
    import webdataset

    import compclip

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "src"], capture_output=True, text=True).stdout.strip()
    return {"torch": torch.__version__, "open_clip": open_clip.__version__, "webdataset": webdataset.__version__,
            "compclip": compclip.__version__, "commit": commit + ("+changes" if dirty else ""), "python": platform.python_version()}


def device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name()
    return f"{platform.processor() or platform.machine()} CPU, {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", default=None, help="comma-separated (default: the tiny CLIP and SigLIP models, then ViT-B-16)")
    parser.add_argument("--methods", default="", help="comma-separated compclip methods beyond clip/siglip, timed beside them")
    parser.add_argument("--batch", type=int, default=None, help="default: 32 for the tiny models, 8 for ViT-B on a CPU")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--shards", type=Path, default=None, help="folder of the shards (written there when missing)")
    parser.add_argument("--profile", default="", help="comma-separated methods whose phases run 3 steps under torch.profiler after "
                        "the warm-up (left out of the phases), printing the operators that took the most device time (CPU time on "
                        "a CPU)")
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated: sides (both entry points and the floor), "
                        "phases (compclip's step in phases), bounds (each method's data alone and step alone)")
    parser.add_argument("--child", choices=["open_clip_train", "compclip"], help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.child:
        child(args.child, rest[1:] if rest[:1] == ["--"] else rest)
        return
    if args.profile and args.steps < WARMUP + 3:
        parser.error(f"--profile needs --steps {WARMUP + 3} or more (the warm-up, then the 3 steps profiled)")
    import torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    scratch = Path(tempfile.mkdtemp(prefix="compclip-train-bench-"))
    try:
        run_all(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_all(args, scratch: Path) -> None:
    shards = write_shards(args.shards or scratch / "shards", args.samples)
    configs = write_map_configs(scratch / "configs")
    import open_clip

    open_clip.add_model_config(str(configs))
    captions = list(first_captions().values())  # the shards' captions
    models = args.models.split(",") if args.models else ["compclip-tiny-clip", "bench-tiny-map", "ViT-B-16"]
    RESULTS.mkdir(parents=True, exist_ok=True)
    print(f"device: {device_name(args.device)}; {versions()}")
    parts = args.parts.split(",")
    if "sides" in parts:
        print("| model | loss | batch | precision | open_clip_train samples/s | compclip samples/s | ratio | floor samples/s | "
              "compclip / floor | compclip's data wait, ms a step | peak MiB (open_clip_train / compclip) |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for model in models:
        siglip = "siglip" in model.lower() or model in MAP_MODELS
        batch = args.batch or (8 if model.startswith("ViT") else 32)
        run_args = argparse.Namespace(**{**vars(args), "batch": batch})
        loss = "siglip" if siglip else "clip"
        methods = list(dict.fromkeys([loss, *filter(None, args.methods.split(","))]))
        figures = {**common(run_args, model), "device": device_name(args.device), "versions": versions(), "loss": loss}
        if "sides" in parts:
            figures["open_clip_train"] = open_clip_train_run(run_args, model, siglip, shards, configs, scratch)
            figures["floor"] = floor_run(run_args, model, siglip, captions)
            figures["compclip"] = {method: compclip_run(run_args, model, method, shards, configs, scratch, captions) for method in methods}
            print_sides(figures, loss)
        if "phases" in parts:
            figures["phases"] = {method: phase_run(run_args, model, method, shards, scratch, captions) for method in methods}
            for method, phases in figures["phases"].items():
                print_phases(model, method, phases)
        if "bounds" in parts:
            figures["bounds"] = {method: bounds_run(run_args, model, method, shards, scratch, captions) for method in methods}
            for method, b in figures["bounds"].items():
                print(f"{model} {method}: data alone {b['data_alone_samples_per_s']:.1f} samples/s; step alone "
                      f"{b['step_alone_samples_per_s']:.1f} samples/s on one batch, on a new batch each step "
                      f"{b['step_alone_new_batches_samples_per_s']:.1f} with the text rows as given and "
                      f"{b['step_alone_new_batches_padded_samples_per_s']:.1f} padded to {b['padded_to']}; batch shapes {b['shapes']}")
        suffix = "" if set(parts) == set(PARTS) else "-" + "-".join(parts)
        name = f"train_vs_open_clip_train-{args.device}-{model}-{args.precision}-b{batch}{suffix}.json"
        (RESULTS / name).write_text(json.dumps(figures, indent=2) + "\n")


def print_sides(figures: dict, loss: str) -> None:
    """A table row per method: its samples/s beside open_clip_train's and the floor's, its mean wait for data (`log.jsonl`'s
    `data_time`), and the peak memory of each."""
    oc, floor = figures["open_clip_train"], figures["floor"]["samples_per_s"]
    base = figures["compclip"][loss]["samples_per_s"]
    for method, cc in figures["compclip"].items():
        peaks = f"{oc['peak_mib']:.0f} / {cc['peak_mib']:.0f}" if cc["peak_mib"] else "–"
        ratio = (f"{cc['samples_per_s'] / oc['samples_per_s']:.2f}×" if method == loss else
                 f"its step {base / cc['samples_per_s']:.2f}× {loss}'s")  # another loss: against compclip's own
        print(f"| {figures['model']} | {method} | {figures['batch']} | {figures['precision']} | {oc['samples_per_s']:.1f} | "
              f"{cc['samples_per_s']:.1f} | {ratio} | {floor:.1f} | {cc['samples_per_s'] / floor:.2f}× | {cc['data_wait_ms']:.1f} | "
              f"{peaks} |")


if __name__ == "__main__":
    main()
