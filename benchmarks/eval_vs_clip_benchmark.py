"""compclip eval against CLIP_benchmark on all 7 SugarCrepe splits: same model, same images, same precision.

The model is an open_clip architecture (ViT-B-32 by default) with random weights (fixed seed),
saved as a compclip checkpoint and exported to a plain open_clip file that CLIP_benchmark
loads. The images are generated stand-ins saved under SugarCrepe's real COCO file names (no
COCO images exist here). CLIP_benchmark runs as its users run it (`clip_benchmark eval
--dataset sugar_crepe`), compclip as `compclip eval --ties clip_benchmark`, at each precision:
fp32 (CLIP_benchmark `--no_amp`), where the script asserts identical per-split accuracies, and
AMP (CLIP_benchmark's default, `torch.autocast` on the device: bf16 on a CPU, so compclip runs
`--precision amp_bf16` there and `amp` on a GPU), where it prints the largest difference.
Targets: compclip >= 3x faster than CLIP_benchmark at each precision.

Needs the `bench` extra: .venv/bin/pip install -e '.[bench]'
Run: .venv/bin/python benchmarks/eval_vs_clip_benchmark.py [--model ViT-B-32] [--precisions fp32,amp]
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from PIL import Image

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
SPLITS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")
# each command line by its module, as installed in this interpreter (a folder on PYTHONPATH has no console scripts)
CLIP_BENCHMARK, COMPCLIP = [sys.executable, "-m", "clip_benchmark.cli"], [sys.executable, "-m", "compclip"]


def prepare(work: Path, model: str) -> tuple[Path, Path, Path]:
    """Stand-in images, a compclip data root, a CLIP_benchmark root, and the model files."""
    images = work / "data" / "coco" / "val2017"
    if not images.is_dir():
        images.mkdir(parents=True)
        names = {r["filename"] for s in SPLITS for r in json.loads((SHARED / "sugarcrepe" / f"{s}.json").read_text()).values()}
        for name in sorted(names):
            seed = int(name.split(".")[0])
            img = Image.effect_noise((320, 240), 40 + seed % 50).convert("RGB")
            img.paste(((seed * 37) % 256, (seed * 91) % 256, (seed * 13) % 256), (seed % 200, seed % 120, seed % 200 + 90, seed % 120 + 90))
            img.save(images / name, quality=90)
        (work / "data" / "sugarcrepe").symlink_to(SHARED / "sugarcrepe")
    cb_root = work / "clip_benchmark_root"
    if not cb_root.is_dir():
        cb_root.mkdir()
        (cb_root / "val2017").symlink_to(images)
        for s in SPLITS:
            (cb_root / f"{s}.json").symlink_to(SHARED / "sugarcrepe" / f"{s}.json")
    ckpt, exported = work / f"{model}-random", work / f"{model}-random.safetensors"
    if not exported.is_file():
        code = (
            "import torch; from compclip.models import load_model, save_checkpoint; from compclip.export.openclip import export_open_clip; "
            f"torch.manual_seed(0); m, _, _ = load_model({model!r}); "
            f"save_checkpoint(m, {str(ckpt)!r}); export_open_clip({str(ckpt)!r}, {str(exported)!r})"
        )
        subprocess.run([sys.executable, "-c", code], check=True)
    return work / "data", cb_root, exported


def timed(cmd: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/compclip-evalbench"))
    parser.add_argument("--model", default="ViT-B-32")
    parser.add_argument("--precisions", default="fp32,amp", help="fp32 and/or amp (CLIP_benchmark's default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    data, cb_root, exported = prepare(work, args.model)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    common = ["--batch_size", str(args.batch_size), "--num_workers", str(args.workers)]
    for precision in args.precisions.split(","):
        ours_precision = "fp32" if precision == "fp32" else "amp_bf16" if args.device == "cpu" else "amp"
        cb_out, ours_out = work / f"clip_benchmark_{precision}", work / f"compclip_{precision}"
        cb_out.mkdir(exist_ok=True)
        cb_seconds = timed([*CLIP_BENCHMARK, "eval", "--dataset", "sugar_crepe", "--dataset_root", str(cb_root),
                            "--model", args.model, "--pretrained", str(exported), *common,  # it takes the GPU when there is one
                            *(["--no_amp"] if precision == "fp32" else []), "--output", str(cb_out / "{dataset}.json")], env)
        ours_seconds = timed([*COMPCLIP, "-q", "eval", "--model", args.model, "--pretrained", str(exported),
                              "--benchmark", "sugarcrepe", "--data-root", str(data), "--ties", "clip_benchmark",
                              "--precision", ours_precision, "--device", args.device, "--batch-size", str(args.batch_size),
                              "--workers", str(args.workers), "--out", str(ours_out)], env)
        ours = json.loads((ours_out / "sugarcrepe.json").read_text())["metrics"]
        print(f"{precision}: CLIP_benchmark {'--no_amp' if precision == 'fp32' else '(AMP)'}, compclip --precision {ours_precision}")
        print(f"{'split':12s} {'CLIP_benchmark':>15s} {'compclip':>10s}")
        largest = 0.0
        for split in SPLITS:
            theirs = json.loads((cb_out / f"sugar_crepe_{split}.json").read_text())["metrics"]["acc"]
            mine, n = ours[split]["acc"], ours[split]["n"]
            largest = max(largest, abs(theirs - mine))
            print(f"{split:12s} {theirs:15.4f} {mine:10.4f}")
            if precision == "fp32":  # the same count of right answers (CLIP_benchmark's mean is float32, compclip's the exact ratio)
                assert round(theirs * n) == round(mine * n), f"{split}: CLIP_benchmark {theirs} != compclip {mine}"
        print(f"largest difference {largest:.4f}")
        print(f"CLIP_benchmark {cb_seconds:8.1f} s")
        print(f"compclip       {ours_seconds:8.1f} s")
        print(f"speed-up       {cb_seconds / ours_seconds:8.2f}x  (target >= 3x)\n", flush=True)


if __name__ == "__main__":
    main()
