"""Binding curve: unseen swap-attribute accuracy as one property of the binding world's training data moves.

For each value of the knob (`heldout`: the fraction of colour×shape pairings never seen in training, so the
coverage of pairings is 1 − heldout; `density`: the chance a mention names each attribute; `completeness`:
the fraction of a scene's objects its caption mentions) this runs the demo's stages 1-5 in its own folder:
a world with that value, a base pretrained from scratch on it, every method fine-tuned from that base once
per seed, and the unseen test split. It prints mean ± 95 % interval over seeds, writes `sweep.json` and
draws the curve (one line per method, interval bars). Every stage is reused when its output exists.
The world's draw (which pairings are held out, which scenes) follows `--world-seed`, by default the first
of `--seeds`: the same knob value in another draw is `--world-seed 1`.
`--demo DIR` reuses a `compclip demo` folder (or one of its `--world-seeds` worlds) for the value whose world it
already has, and draws the curve into its report too (`report/seeds.md` shows it from the demo's next run on).

Run: .venv/bin/python research/world_sweep.py --knob heldout --values 0.1,0.25,0.5 \\
         [--methods siglip,c2lip] [--seeds 0,1,2] [--world-seed 0] [--out runs/sweep] [--demo runs/demo]
         [--plot docs/binding_curve_heldout.png]
"""
import argparse
import json
from dataclasses import asdict
from pathlib import Path

from compclip.demo import FINE_TUNE, PRETRAIN_BATCH, PRETRAIN_STEPS, compare_methods, world_config
from compclip.io import write_json
from compclip.plots import binding_curve
from compclip.stats import fmt, interval

KNOBS = ("heldout", "density", "completeness")
METRIC = "SC swap-att"


def folder(args: argparse.Namespace, value: float, world: dict) -> Path:
    """The demo folder (or one of its `--world-seeds` worlds) whose world has exactly this point's settings, or this
    point's own folder."""
    cfg = world_config(world, args.world_seed, args.n_train, args.n_test)
    if args.demo is not None:
        for candidate in (args.demo, args.demo / "worlds" / f"seed-{args.world_seed}"):
            manifest = candidate / "world" / "manifest.json"
            if manifest.is_file() and json.loads(manifest.read_text())["config"] == asdict(cfg):
                return candidate
    return args.out / f"{args.knob}-{value:g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--knob", choices=KNOBS, default="heldout")
    parser.add_argument("--values", default="0.1,0.25,0.5", help="comma-separated values of the knob")
    parser.add_argument("--methods", default="siglip,c2lip")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--world-seed", type=int, default=None, help="the world's draw (default: the first of --seeds)")
    parser.add_argument("--out", type=Path, default=Path("runs/sweep"))
    parser.add_argument("--demo", type=Path, default=None, help="a `compclip demo` folder to reuse where its world matches")
    parser.add_argument("--plot", type=Path, default=None, help="the figure (default: OUT/binding_curve_KNOB.png)")
    parser.add_argument("--n-train", type=int, default=20_000)
    parser.add_argument("--n-test", type=int, default=1250)
    parser.add_argument("--pretrain-steps", type=int, default=PRETRAIN_STEPS)
    parser.add_argument("--pretrain-batch-size", type=int, default=PRETRAIN_BATCH)
    parser.add_argument("--steps", type=int, default=FINE_TUNE["steps"])
    parser.add_argument("--batch-size", type=int, default=FINE_TUNE["batch_size"])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.world_seed is None:
        args.world_seed = int(args.seeds.split(",")[0])
    values = [float(v) for v in args.values.split(",")]
    points = {}  # value: {model: [swap-att per seed]}
    for value in values:
        world = {args.knob: value, "seed": args.world_seed}
        numbers, _, _ = compare_methods(folder(args, value, world), args.methods, args.n_train, args.n_test, args.pretrain_steps,
                                        args.steps, args.batch_size, args.seeds, args.workers, world, ("unseen",),
                                        pretrain_batch_size=args.pretrain_batch_size)
        points[value] = {model: by_split["unseen"][METRIC] for model, by_split in numbers.items()}
    models = list(points[values[0]])
    write_json(args.out / "sweep.json", {"knob": args.knob, "metric": f"unseen {METRIC}", "seeds": args.seeds,
                                         "world_seed": args.world_seed, "methods": args.methods,
                                         "points": [{"value": v, "per_seed": points[v]} for v in values]})
    print(f"unseen swap-attribute (%), mean ± 95 % interval over seeds {args.seeds}, by {args.knob}")
    print(f"| {args.knob} | " + " | ".join(models) + " |")
    print("|" + " --- |" * (1 + len(models)))
    for value in values:
        print(f"| {value:g} | " + " | ".join(fmt(*interval(points[value][m])) for m in models) + " |")
    curves = {m: [(v, *interval(points[v][m])) for v in values] for m in models}
    label = {"heldout": "held-out fraction of colour×shape pairings (coverage = 1 − x)",
             "density": "attribute density (chance a mention names each attribute)",
             "completeness": "caption completeness (fraction of objects mentioned)"}[args.knob]
    print(binding_curve(curves, label, args.plot or args.out / f"binding_curve_{args.knob}.png"))
    if args.demo is not None:  # the demo's report shows it from its next run on
        print(binding_curve(curves, label, args.demo / "report" / f"binding_curve_{args.knob}.png"))


if __name__ == "__main__":
    main()
