"""`compclip report`: result folders in, Markdown and CSV tables and PNG plots out.

The summary table follows the C2LIP paper's Table 2: one row per model; SugarCrepe add /
replace / swap, SugarCrepe++ replace and swap (ITT, TOT), ImageNet (the `zeroshot/imagenet`
dataset) and the mean over zero-shot datasets, retrieval R@5 (both directions, mean over
datasets), and their average, left empty unless all ten are there. With a paper named, the results stand beside
that paper's published numbers (`eval/papers/`), column by column, with the difference.
"""
from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pandas as pd

from ..errors import UsageError
from ..io import atomic_path
from ..plots import grouped_bars, split_bars
from ..stats import fmt, interval, wilson
from ..text import markdown_text
from .base import NOT_APPLICABLE, REGISTRY
from .items import SUFFIX as ITEMS_SUFFIX
from .results import flat_copies, items_frame, load_results

SUMMARY = ("SC add", "SC replace", "SC swap", "SC++ replace ITT", "SC++ replace TOT", "SC++ swap ITT", "SC++ swap TOT",
           "ImageNet", "zero-shot mean", "retrieval R@5")  # the C2LIP paper's Table 2


def columns() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every report column, header to (benchmark, metric path): what each benchmark declares it fills (`Benchmark.columns`);
    a metric that is a dict is read as its "acc"."""
    return {header: (name, path) for name, bench in REGISTRY.items() for header, path in bench.columns}


def column_value(records: dict[str, dict[str, Any]], header: str) -> float | str:
    """Column `header` of one model's `{benchmark: record}` in %, NaN where the benchmark or metric is absent,
    "n/a" where the model has no such score."""
    value = metric(records, *columns()[header])
    if value == NOT_APPLICABLE:
        return value
    return float(value) * 100 if isinstance(value, (int, float)) else float("nan")


def metric(records: dict[str, dict[str, Any]], bench: str, path: tuple[str, ...]) -> Any:
    """The metric at `path` of one model's `bench` result as written (a dict read as its "acc"), or None."""
    value: Any = records.get(bench, {}).get("metrics", {})
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value.get("acc") if isinstance(value, dict) else value


def _missing(value: float | str) -> bool:
    return isinstance(value, str) or math.isnan(value)


AVERAGE = f"average of the {len(SUMMARY)}"


def summary_table(results) -> pd.DataFrame:
    """One row per model: the SUMMARY columns and their average, left empty unless every one is there
    (an average of whichever columns happen to be present compares with nothing)."""
    rows = {}
    for model, records in results.items():
        row = {col: column_value(records, col) for col in SUMMARY}
        values = list(row.values())
        row[AVERAGE] = float("nan") if any(_missing(v) for v in values) else sum(values) / len(values)
        rows[model] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "model"
    return table


def spectrum_table(results) -> pd.DataFrame:
    """One row per model, one column per benchmark of the field's widest sweep that compclip reads (Oh et al. 2024,
    ytaek-oh/vl_compo's `results.csv`, its columns in its order), each the unweighted mean of the parts its benchmarks
    declare (`Benchmark.spectrum_parts`), NaN unless every part was scored; and their mean, left empty unless every
    column is there. vl_compo publishes its per-part numbers (`individual_results.csv`) and these columns, not its code:
    each rule is the one that turns the first file into the second for all of its models."""
    feeds: dict[str, list[tuple[str, Any]]] = {}
    for name, bench in REGISTRY.items():
        if bench.spectrum:
            feeds.setdefault(bench.spectrum, []).append((name, bench))
    rows = {}
    for model, records in results.items():
        row = {}
        for column in sorted(feeds):
            parts = [part for name, bench in feeds[column]
                     for part in (bench.spectrum_parts(records[name].get("metrics", {})) if name in records else [None])]
            row[column] = float("nan") if None in parts else 100 * sum(parts) / len(parts)
        row[f"mean of the {len(feeds)}"] = float("nan") if any(math.isnan(v) for v in row.values()) else sum(row.values()) / len(row)
        rows[model] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "model"
    return table


SPLIT_FIGURES = ("acc", "itt", "tot", "text", "image", "group", "pair_acc", "set_acc")


def split_tables(results) -> dict[str, pd.DataFrame]:
    """Per benchmark: one row per model, one column per split (accuracy, or each numeric metric)."""
    tables: dict[str, dict[str, dict[str, float]]] = {}
    for model, records in results.items():
        for bench, record in records.items():
            row = {}
            metrics = record.get("metrics", {})
            flat = flat_copies(metrics)
            for split, metric in metrics.items():
                if split in flat:
                    continue
                if isinstance(metric, dict):
                    for key, value in metric.items():
                        if key in SPLIT_FIGURES or "recall@" in key:
                            cell = split if key == "acc" else f"{split} {key}"
                            row[cell] = value if value == NOT_APPLICABLE else float("nan") if value is None else float(value) * 100
                elif isinstance(metric, float):  # a score; ints are counts
                    row[split] = float(metric) * 100
                elif metric == NOT_APPLICABLE:
                    row[split] = metric
            tables.setdefault(bench, {})[model] = row
    frames = {b: pd.DataFrame.from_dict(t, orient="index") for b, t in tables.items()}
    for frame in frames.values():
        frame.index.name = "model"
    return frames


def split_intervals(results, bench: str, table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, str]]:
    """Each cell's 95 % interval (Wilson's, over the items it was scored on; NaN where the result names no count, as a
    family's mean of splits) as low and high tables, and each column's item count as a tick label says it."""
    values = table.apply(pd.to_numeric, errors="coerce")
    low, high = values * float("nan"), values * float("nan")
    counts: dict[str, set[int]] = {}
    for model in table.index:
        metrics = results[model][bench]["metrics"]
        for column in table.columns:
            split, _, key = column.partition(" ")
            inner = metrics.get(split)
            if isinstance(inner, dict):
                n = inner.get("n_itt" if key == "itt" else "n")
            else:  # a top-level figure (Winoground's text, image, group) counts the benchmark's items
                n = metrics.get("n") if split in SPLIT_FIGURES else None
            value = values.loc[model, column]
            if not isinstance(n, int) or n <= 0 or not math.isfinite(value):
                continue
            ci_low, ci_high = wilson(round(value / 100 * n), n)
            low.loc[model, column], high.loc[model, column] = 100 * ci_low, 100 * ci_high
            counts.setdefault(column, set()).add(n)
    return low, high, {c: f"{min(n):,}" if len(n) == 1 else f"{min(n):,}–{max(n):,}" for c, n in counts.items()}


def chance_levels(items: pd.DataFrame | None, bench: str) -> dict[str, float]:
    """Each split's chance of a right answer where its items say it: one over an item's number of caption options (a
    pair 50 %, What'sUp's four 25 %, SugarCrepe++'s two true of three 33 %), averaged over the split's items."""
    if items is None or "texts" not in items.columns:
        return {}
    mine = items[(items["benchmark"] == bench) & items["texts"].notna()]
    first = mine[mine["model"] == mine["model"].iloc[0]] if len(mine) else mine
    levels = first.groupby("split")["texts"].apply(lambda t: float(np.mean([1 / len(x) for x in t])))
    return {**levels.to_dict(), **{f"{s} itt": v for s, v in levels.items()}}


def blind_tables(results) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """Per benchmark scored with --blind: the blind table (split_tables' layout) and accuracy − blind, for the models
    that have both."""
    blind = {m: {b: {**r, "metrics": r["blind"]} for b, r in records.items() if r.get("blind")} for m, records in results.items()}
    real = split_tables(results)
    out = {}
    for bench, table in split_tables({m: r for m, r in blind.items() if r}).items():
        seen = real[bench].loc[table.index, table.columns]
        numeric = lambda frame: frame.apply(pd.to_numeric, errors="coerce")  # noqa: E731 (a "not applicable" cell is no number)
        grounded = numeric(seen) - numeric(table)
        for model in table.index:  # one image: its mean is itself, and "accuracy − blind" is 0 by construction, not a finding
            if results[model][bench].get("blind_images") == 1:
                grounded.loc[model] = float("nan")
        out[bench] = (table, grounded)
    return out


def mixed_protocols(results) -> list[str]:
    """A warning paragraph for each setting that differs between the models' results of one benchmark (precision,
    compclip version, tie rule): their numbers may differ for that reason alone, so the report says so."""
    lines = []
    for key, what in (("precision", "precisions"), ("compclip_version", "compclip versions"), ("ties", "tie rules")):
        mixed = []
        for bench in sorted({b for records in results.values() for b in records}):
            values = {m: str(records[bench].get(key, "unknown")) for m, records in results.items() if bench in records}
            if len(set(values.values())) > 1:
                mixed.append(f"{bench} ({', '.join(f'{m}: {v}' for m, v in values.items())})")
        if mixed:
            lines += [f"**Mixed {what}**, so these columns may differ for that reason alone: {markdown_text('; '.join(mixed))}.", ""]
    return lines


def _markdown(df: pd.DataFrame) -> str:
    """A table whose model labels, column names and text cells (folder names and result fields: anyone's) are text."""
    cols = ["model", *df.columns]
    lines = ["| " + " | ".join(markdown_text(c) for c in cols) + " |", "|" + " --- |" * len(cols)]
    for model, row in df.iterrows():
        cells = [markdown_text(v) if isinstance(v, str) else "—" if math.isnan(v) else f"{v:.1f}" for v in row]
        lines.append("| " + " | ".join([markdown_text(model), *cells]) + " |")
    return "\n".join(lines)


def _short(column: str) -> str:
    """A tick label: retrieval's metric keys read as "T→I R@5" (text to image) and "I→T R@5"."""
    for key, label in (("image_retrieval_recall@", "T→I R@"), ("text_retrieval_recall@", "I→T R@"), ("mean_recall@", "mean R@")):
        column = column.replace(key, label)
    return column


def list_papers() -> list[str]:
    return sorted(e.name.removesuffix(".json") for e in resources.files("compclip.eval").joinpath("papers").iterdir()
                  if e.name.endswith(".json"))


def paper_numbers(name: str) -> dict[str, Any]:
    """A paper's published numbers (`eval/papers/NAME.json`): its `columns` (each a benchmark, the metric paths of a result
    JSON it reads, averaged where several, and the `protocol` the paper computed it by; or an `average` of other columns;
    or `reproducible: false` with `why`), its `tables` and `rows` (model, table, the paper's `line`, {column: value in %})."""
    if name not in list_papers():
        raise UsageError(f"--paper {name}: no such paper; known: {', '.join(list_papers())}")
    return json.loads(resources.files("compclip.eval").joinpath("papers", f"{name}.json").read_text(encoding="utf-8"))


def metric_value(records: dict[str, dict[str, Any]], benchmark: str, paths: list[str]) -> float:
    """The mean, in %, of the metrics at `paths` ("flickr30k.image_retrieval_recall@5"; a dict read as its "acc") of one
    model's `benchmark` result, or of the result of that one split (`--benchmark sugarcrepe/swap_att` writes
    `sugarcrepe-swap_att.json`); NaN unless every one is there."""
    values = []
    for path in paths:
        parts = tuple(path.split("."))
        value = metric(records, scored_in(records, benchmark, path), parts)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
            return float("nan")
        values.append(float(value) * 100)
    return sum(values) / len(values)


def scored_in(records: dict[str, dict[str, Any]], benchmark: str, path: str) -> str:
    """The result that holds the metric at `path` of `benchmark`: the whole benchmark's, else that of the one split it
    names (`sugarcrepe-swap_att`), where its value and the protocol it was scored by are both read."""
    split = f"{benchmark}-{path.split('.')[0]}"
    return split if metric(records, benchmark, tuple(path.split("."))) is None and split in records else benchmark


def column_result(records: dict[str, dict[str, Any]], columns: dict[str, Any], name: str) -> float:
    """One model's value of the paper column `name`, in %: its metric, or the mean of the columns it averages (NaN
    unless each is there, as the paper forms it)."""
    spec = columns[name]
    if "average" in spec:
        values = [column_result(records, columns, member) for member in spec["average"]]
        return float("nan") if any(math.isnan(v) for v in values) else sum(values) / len(values)
    return metric_value(records, spec["benchmark"], spec["metric"])


def protocol_differences(records: dict[str, dict[str, Any]], columns: dict[str, Any], name: str) -> list[str]:
    """How one model's result for the paper column `name` was computed otherwise than the paper computed it: each
    benchmark option, tie rule or dataset field (`layout`, `subset`) the result records that differs from the column's
    `protocol`, as "key=yours (paper: theirs)", and each departure from the official code the benchmark recorded
    (`Benchmark.departures`); an average differs where a column it averages does."""
    spec = columns[name]
    if "average" in spec:
        return list(dict.fromkeys(d for member in spec["average"] for d in protocol_differences(records, columns, member)))
    scored = dict.fromkeys(scored_in(records, spec["benchmark"], path) for path in spec["metric"])
    return list(dict.fromkeys(d for name in scored if name in records for d in record_differences(records[name], spec)))


def record_differences(record: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    """How one result record was computed otherwise than the paper column `spec` says (`protocol_differences`)."""
    protocol = spec.get("protocol", {})
    found = [] if record.get("complete", True) else [f"{spec['benchmark']} incomplete (images or files were missing)"]
    found += [f"{spec['benchmark']}: {departure}" for departure in record.get("departures", [])]  # the benchmark's own word
    if "ties" in protocol and record.get("ties") != protocol["ties"]:
        found.append(f"ties={record.get('ties', 'unrecorded')} (paper: {protocol['ties']})")
    options = record.get("options") or {}
    for key, wanted in protocol.get("options", {}).items():
        if options.get(key, "unrecorded") != wanted:
            found.append(f"{spec['benchmark']}.{key}={options.get(key, 'unrecorded')} (paper: {wanted})")
    for key, wanted in protocol.get("fields", {}).items():
        allowed = wanted if isinstance(wanted, list) else [wanted]
        for dataset in dict.fromkeys(path.split(".")[0] for path in spec["metric"]):
            entry = record.get("metrics", {}).get(dataset)
            have = entry.get(key) if isinstance(entry, dict) else None
            if entry is not None and have not in allowed:
                found.append(f"{dataset} {key}={have} (paper: {' or '.join(str(a) for a in allowed)})")
    return found + release_differences(record, spec)


def release_differences(record: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    """How the files one result scored for the paper column `spec` differ from the benchmark's official release
    (`Benchmark.release`): fewer items than the release's files hold ("a subset of the release (N of M items)", also
    for a result that recorded no files, by its counts), else a file whose recorded SHA-256 (`files`) is not the
    published one ("files differ from the release"); nothing where they are the release's or nothing is known of it."""
    paths, bench = tuple(spec["metric"]), REGISTRY[spec["benchmark"]]
    release = bench.release(paths)
    if not release:
        return []
    official = [count for _, count in release.values()]
    read = bench.items_read(record.get("metrics", {}), paths)
    if read is not None and None not in official and read < sum(official):
        return [f"{spec['benchmark']}: a subset of the release ({read:,} of {sum(official):,} items)"]
    files = record.get("files") or {}
    differ = [path for path, (sha256, _) in release.items() if path in files and files[path] != sha256]
    return [f"{spec['benchmark']}: files differ from the release ({', '.join(differ)})"] if differ else []


ACTIVATIONS = {"gelu": "plain GELU", "quickgelu": "QuickGELU"}  # a row's or a result's `activation`, as the report says it


def row_entry(paper: str, model: str):
    """The registry entry whose weights are the `paper`'s row `model` (`Released.rows`), or None where none is."""
    from ..models.released import get_released, list_released

    return next((entry for entry in map(get_released, list_released()) if [paper, model] in entry.rows), None)


def row_activation(row: dict[str, Any], entry) -> str | None:
    """The activation the row's published numbers were computed with: the one it declares (`activation.ran`, with the
    evidence), else that of the registry's loading of its weights (None where the registry chooses none)."""
    return row.get("activation", {}).get("ran") or (entry.activation if entry is not None else None)


def activations_run(records: dict[str, dict[str, Any]], entry) -> list[str]:
    """The activations one model's results ran `entry`'s weights with (`eval --model ID` records `activation`; a result
    of an earlier compclip, which had no `-gelu` ids, ran the entry's own); none where they scored other weights."""
    from ..models.released import get_released

    if entry is None:
        return []
    mine = [r for r in records.values() if r.get("released") == entry.id]
    return list(dict.fromkeys(r.get("activation") or get_released(entry.id).activation for r in mine))


def activation_command(entry, activation: str) -> str:
    """The `--model` that runs `entry`'s weights with `activation`: its id, or its id with `-gelu` after it."""
    from ..models.released import GELU_SUFFIX

    return f"--model {entry.id}{GELU_SUFFIX if activation == 'gelu' else ''}"


def activation_differences(records: dict[str, dict[str, Any]], row: dict[str, Any], entry) -> list[str]:
    """How one model's run of the row's weights differs in activation from the row's published numbers, with the id
    that runs the row's: "activation=quickgelu (paper: gelu, `--model negclip-b32-gelu`)"."""
    wanted = row_activation(row, entry)
    return [f"activation={ran} (paper: {wanted}, {activation_command(entry, wanted)})" for ran in activations_run(records, entry)
            if wanted and ran and ran != wanted]


def activation_notes(rows: list[dict[str, Any]], entry, results, runs: dict[str, list[str]]) -> list[str]:
    """A note for the rows that declare the activation their numbers were computed with: which, the evidence, the id that
    runs it, and which of the models that scored these weights ran it (≠ beside those that did not)."""
    ran = {label: list(dict.fromkeys(a for m in members for a in activations_run(results[m], entry))) for label, members in runs.items()}
    notes = []
    for row in rows:
        declared = row.get("activation")
        if not declared:
            continue
        said = [f"{label} ran {' and '.join(ACTIVATIONS[a] for a in theirs)}{'' if theirs == [declared['ran']] else ' (≠)'}"
                for label, theirs in ran.items() if theirs]
        command = f"; {activation_command(entry, declared['ran'])} scores the weights so" if entry is not None else ""
        notes.append(f"{row['table']}'s numbers of this row were computed with {ACTIVATIONS[declared['ran']]} ({declared['evidence']})"
                     f"{command}; {'; '.join(said) if said else 'none of yours scored these weights'}")
    return notes


def paper_comparison(results, paper: str, model: str | None = None,
                     runs: dict[str, list[str]] | None = None) -> tuple[pd.DataFrame, dict[str, Any], list[str]]:
    """Each column the paper reports for `model` (default: its own method's row): the paper's value, each result's, the
    difference (result − paper) and how the result's protocol differs from the paper's (empty: the same); and the columns
    no result has (benchmarks not run). Columns compclip cannot compute are listed in `about["not_reproducible"]`.

    `runs` groups the labels of `results` into models ({model: [its runs' labels]}; default: each label a model of one
    run): a model of several runs (seeds) stands as their mean with the half-width of its 95 % t-interval (`MODEL ±`),
    since a paper's row printed with ± (OC-CLIP's) is a mean over the authors' runs and one run beside it differs from
    it by the seed's variation as well as the method's."""
    runs, copies = distinct_runs(results, runs or {label: [label] for label in results})
    numbers = paper_numbers(paper)
    columns = numbers["columns"]
    model = model or numbers["default_model"]
    rows = [r for r in numbers["rows"] if r["model"] == model]
    if not rows:
        models = ", ".join(dict.fromkeys(r["model"] for r in numbers["rows"]))
        raise UsageError(f"--paper-model {model!r}: the {paper} paper has no such row; its rows: {models}")
    wanted = {col: (value, row) for row in rows for col, value in row["values"].items()}
    entry = row_entry(paper, model)
    table, not_run, unreachable = {}, [], {}
    for col, (value, row) in wanted.items():
        if columns[col].get("reproducible", True) is False:
            unreachable[col] = columns[col]["why"]
            continue
        line: dict[str, Any] = {"paper": value, "table": row["table"]}
        for label, members in runs.items():
            scored = [(m, v) for m in members if not math.isnan(v := column_result(results[m], columns, col))]
            mine, half = interval([v for _, v in scored]) if scored else (math.nan, math.nan)
            line[label], line[f"{label} ±"], line[f"{label} − paper"], line[f"{label} runs"] = mine, half, mine - value, len(scored)
            differences = (d for m, _ in scored for d in [*protocol_differences(results[m], columns, col),
                                                          *activation_differences(results[m], row, entry)])
            line[f"{label} protocol"] = "; ".join(dict.fromkeys(differences))
        if all(math.isnan(column_result(r, columns, col)) for r in results.values()):
            not_run.append(col)
        table[col] = line
    frame = pd.DataFrame.from_dict(table, orient="index")
    frame.index.name = "column"
    notes = [r["note"] for r in rows if r.get("note")] + activation_notes(rows, entry, results, runs)
    assumed = {col: columns[col]["assumed"] for col in table if columns[col].get("assumed")}  # compclip's reading of a silent paper
    averaged = [r["table"] for r in rows if "\\pm" in r["line"]]  # the paper's row printed as mean ± spread over its runs
    from ..recipes import get_recipe, list_recipes

    recipes = {name: get_recipe(name).departures for name in list_recipes()  # the recipes that reproduce this row
               if get_recipe(name).numbers == {"paper": paper, "model": model}}
    return frame, {"paper": paper, "model": model, "citation": numbers["citation"], "not_reproducible": unreachable,
                   "assumed": assumed, "notes": notes, "paper_averaged": averaged, "recipes": recipes, "copies": copies,
                   "yours": {label: ", ".join(dict.fromkeys(models_scored(results[m]) for m in members))
                             for label, members in runs.items()}}, not_run


def weights_scored(records: dict[str, dict[str, Any]]) -> frozenset[str]:
    """The SHA-256 of the weights a folder's results scored, as they record it (empty where none does: a model in memory)."""
    return frozenset(r["weights_sha256"] for r in records.values() if r.get("weights_sha256"))


def distinct_runs(results, runs: dict[str, list[str]]) -> tuple[dict[str, list[str]], list[str]]:
    """Each model's runs, a run whose results scored the same weights as an earlier run of that model left out, and a
    line naming each left out: such a folder is a copy of that run, not another seed, and counting it twice would make a
    mean of one run "2 runs" with a spread of zero."""
    kept, copies = {}, []
    for label, members in runs.items():
        first: dict[frozenset[str], str] = {}
        kept[label] = []
        for member in members:
            weights = weights_scored(results[member])
            if weights and weights in first:
                copies.append(f"{member} (the weights of {first[weights]})")
                continue
            first.setdefault(weights, member)
            kept[label].append(member)
    return kept, copies


def measured_rows(results: dict[str, dict[str, dict[str, Any]]], paper: str, runs: dict[str, list[str]]) -> dict[str, str]:
    """{model: the `paper`'s row it is} for each model whose results scored one released checkpoint (`compclip eval --model
    ID` records the id as `released`) that is a row of that paper: a sweep over the registry is set beside its rows."""
    from ..models.released import get_released, is_released

    found = {}
    for label, members in runs.items():
        ids = {record.get("released") for m in members for record in results[m].values()}
        if len(ids) == 1 and (released := ids.pop()) and is_released(released):
            rows = [row for on, row in get_released(released).rows if on == paper]
            if rows:
                found[label] = rows[0]
    return found


def paper_comparisons(results, paper: str, model: str | None,
                      runs: dict[str, list[str]]) -> list[tuple[pd.DataFrame, dict[str, Any], list[str]]]:
    """`paper_comparison`s of the report: with `model` (`--paper-model`), every result against that row; without, each
    model that scored a released checkpoint of the paper's rows against its own row, and the others against the paper's
    own method's row."""
    if model:
        return [paper_comparison(results, paper, model, runs)]
    rows = measured_rows(results, paper, runs)
    others = {label: members for label, members in runs.items() if label not in rows}
    own = [paper_comparison({m: results[m] for m in runs[label]}, paper, row, {label: runs[label]}) for label, row in rows.items()]
    return ([paper_comparison({m: results[m] for ms in others.values() for m in ms}, paper, None, others)] if others else []) + own


def models_scored(records: dict[str, dict[str, Any]]) -> str:
    """The model a folder's results scored, as they record it (`model`, `pretrained`), and where it is one of the toy
    models compclip bundles (random weights at a few pixels a side), that it is: no paper's model."""
    from ..models import BUNDLED_MODELS

    scored = dict.fromkeys(" ".join(filter(None, (str(r.get("model", "")), str(r.get("pretrained") or "")))) for r in records.values())
    names = ", ".join(s for s in scored if s) or "unrecorded"
    bundled = [n for n in BUNDLED_MODELS if any(n in s for s in scored)]
    return names + (f" (a toy model compclip bundles, {', '.join(bundled)}: not the paper's)" if bundled else "")


def paper_markdown(frame: pd.DataFrame, about: dict[str, Any], not_run: list[str]) -> str:
    """The comparison as Markdown: paper | yours | difference per column, a value computed by another protocol than the
    paper's marked ≠ and its differences listed below; then the columns not run and those compclip cannot compute."""
    labels = [c for c in frame.columns if c not in ("paper", "table") and not c.endswith((" − paper", " protocol", " ±", " runs"))]
    cols = ["column", "table", "paper", *[c for label in labels for c in (label, f"{label} − paper")]]
    yours = "; ".join(f"{label}: {model}" for label, model in about.get("yours", {}).items())
    lines = [f"Against {markdown_text(about['citation'])}, row {markdown_text(repr(about['model']))} (in %; a difference is "
             "yours − the paper's; ≠ marks a value computed by another protocol than the paper's). The paper's row is its "
             f"model; yours are the models your results scored ({markdown_text(yours)}), beside it, whatever they are:", "",
             "| " + " | ".join(markdown_text(c) for c in cols) + " |", "|" + " --- |" * len(cols)]
    differing = []
    for name, row in frame.iterrows():
        cells = [markdown_text(name), markdown_text(row["table"]), f"{row['paper']:.1f}"]
        for label in labels:
            mine, other = row[label], row[f"{label} protocol"]
            mark = " ≠" if isinstance(other, str) and other else ""
            cells += ["—" if math.isnan(mine) else f"{fmt(mine, row[f'{label} ±'])}{mark}",
                      "—" if math.isnan(mine) else f"{row[f'{label} − paper']:+.1f}"]
            if mark:
                differing.append(f"{name} ({label}): {other}")
        lines.append("| " + " | ".join(cells) + " |")
    counted = {label: sorted({int(n) for n in frame[f"{label} runs"] if n}) for label in labels}
    several = [f"{label} ({'/'.join(map(str, n))} runs)" for label, n in counted.items() if n and max(n) > 1]
    if several:
        lines += ["", "A model of several runs is their mean ± the half-width of its 95 % t-interval over the runs: "
                  + markdown_text(", ".join(several)) + "."]
    single = [label for label, n in counted.items() if n == [1]]
    if single and about.get("paper_averaged"):
        tables = markdown_text(", ".join(about["paper_averaged"]))
        lines += ["", f"The paper's row is a mean over its authors' runs (printed with ±: {tables}); "
                  f"{markdown_text(', '.join(single))} {'is one run' if len(single) == 1 else 'are one run each'} beside it, so the "
                  "difference holds the seed's variation too: give each seed's results folder comma-joined as one model "
                  "(`compclip report r/seed-0,r/seed-1,r/seed-2 ...`) for their mean and interval."]
    if about.get("copies"):
        lines += ["", "Counted once, the same weights as a run before them (a copy of its folder, not another seed): "
                  + markdown_text("; ".join(about["copies"])) + "."]
    if differing:
        lines += ["", "Computed by another protocol than the paper's (≠): " + markdown_text("; ".join(differing)) + "."]
    if about.get("assumed"):
        assumed = "; ".join(f"{c} ({why})" for c, why in about["assumed"].items())
        lines += ["", "A protocol compclip assumed where the paper does not state it: " + markdown_text(assumed) + "."]
    if not_run:
        lines += ["", f"Not run (no result has them): {markdown_text(', '.join(not_run))}."]
    if about.get("not_reproducible"):
        unreachable = "; ".join(f"{c} ({why})" for c, why in about["not_reproducible"].items())
        lines += ["", f"Not reproducible here: {markdown_text(unreachable)}."]
    for note in about.get("notes", []):
        lines += ["", f"Note on this row: {markdown_text(note)}."]
    for recipe, departures in about.get("recipes", {}).items():
        lines += ["", f"`compclip train --recipe {markdown_text(recipe)}` reproduces this row and departs from its training: "
                  + markdown_text("; ".join(departures)) + "."]
    return "\n".join(lines)


def build_report(folders: list[str | Path], out: str | Path, paper: str | None = None, paper_model: str | None = None,
                 labels: list[str] | None = None, html: bool = False, data_root: str | Path | None = None) -> Path:
    """Write `OUT/report.md`, `OUT/summary.csv`, `OUT/<benchmark>.csv` and `OUT/<benchmark>.png` (with PDF and SVG: each
    split's bars with 95 % intervals, item counts and chance); with `paper`, also the results beside that paper's
    published numbers (`OUT/paper.csv`, `OUT/paper.md` and a section of the report). `labels` name the models (default:
    their folders'). Where the folders hold per-item results, each model is compared item by item with the first
    (`compclip compare`), and with `html` an error gallery is written (`OUT/report.html`, the figures at its top), its
    images found under the data root each result records, or under `data_root` where the data has moved since."""
    out = Path(out)
    groups = [str(f).split(",") for f in folders]  # a model's several runs (seeds) comma-joined, as `compclip compare` takes them
    folders = [run for group in groups for run in group]
    results = load_results(folders)
    if labels and len(set(labels)) != len(labels):
        raise UsageError(f"--label names two models alike: {', '.join(labels)}")
    found, runs = iter(results), {}  # {model: its runs' labels}, in the order given
    for i, group in enumerate(groups):
        members = [next(found) for _ in group]
        runs[labels[i] if labels else ",".join(members)] = members
    names = {run: model if len(members) == 1 else f"{model} [{run}]" for model, members in runs.items() for run in members}
    results = {names[m]: r for m, r in results.items()}
    runs = {model: [names[run] for run in members] for model, members in runs.items()}
    items = _items_of(folders, names, data_root)
    if html and items is None:
        raise UsageError("--html shows each item a model got wrong: these results have no per-item files (<benchmark>.items.parquet); "
                         "run `compclip eval` again for them")
    comparisons = paper_comparisons(results, paper, paper_model, runs) if paper else []  # a wrong name stops before writing
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; the report writes a folder")
    out.mkdir(parents=True, exist_ok=True)
    summary = summary_table(results)
    parts = ["# Results", "", "Accuracies and recalls in %. SC = SugarCrepe, ITT = image-to-text, TOT = text-only; "
             f"“{AVERAGE}” averages the {len(SUMMARY)} columns before it and is left empty (—) unless a model has all of "
             "them.", "", _markdown(summary), ""]
    with atomic_path(out / "summary.csv") as tmp:
        summary.to_csv(tmp, float_format="%.2f")
    figures = [grouped_bars(summary.rename(columns=_short), "summary", out / "summary.png")]  # the gallery shows them too
    parts += ["![summary](summary.png)", ""]
    parts += mixed_protocols(results)
    incomplete = [f"{m}/{b}" for m, recs in results.items() for b, r in recs.items() if not r.get("complete", True)]
    if incomplete:
        parts += [f"Incomplete (missing images or files): {markdown_text(', '.join(incomplete))}.", ""]
    for bench, table in split_tables(results).items():
        with atomic_path(out / f"{bench}.csv") as tmp:
            table.to_csv(tmp, float_format="%.2f")
        low, high, counts = split_intervals(results, bench, table)
        figures.append(split_bars(table, low, high, counts, chance_levels(items, bench), bench, out / f"{bench}.png"))
        ties = {r[bench].get("ties") for r in results.values() if bench in r}
        parts += [
            f"## {markdown_text(bench)}",
            "",
            f"Ties: {markdown_text(', '.join(sorted(str(t) for t in ties if t)))}.",
            "",
            _markdown(table),
            "",
            f"![{markdown_text(bench)}]({quote(bench)}.png) ([PDF]({quote(bench)}.pdf), [SVG]({quote(bench)}.svg): bars with 95 % "
            "intervals over the items, n per split, the dashed line at chance)",
            "",
        ]
    spectrum = spectrum_table(results)
    if spectrum.iloc[:, :-1].notna().any().any():
        with atomic_path(out / "spectrum.csv") as tmp:
            spectrum.to_csv(tmp, float_format="%.2f")
        parts += ["## The field's compositionality columns", "",
                  f"Each benchmark as the widest published sweep scores it (Oh et al. 2024, “Exploring the Spectrum of "
                  f"Visio-Linguistic Compositionality and Recognition”, ytaek-oh/vl_compo's `results.csv`): one number each, "
                  f"the mean of its parts (docs/data.md says which), empty (—) unless every part was scored. “"
                  f"{spectrum.columns[-1]}” is left empty unless all are there; vl_compo's `comp_avg` also averages ColorSwap "
                  f"and MMVP-VLM (twelve in all), which compclip does not read, so it compares with no `comp_avg`.",
                  "", _markdown(spectrum), ""]
    if items is not None and len(results) > 1:
        parts += paired_section(items, list(results), out)
    for bench, (blind, grounded) in blind_tables(results).items():
        with atomic_path(out / f"{bench}-blind.csv") as tmp:
            blind.to_csv(tmp, float_format="%.2f")
        parts += [f"## {markdown_text(bench)}: what the texts alone score", "",
                  "Blind (`compclip eval --blind`): every image embedded as the mean of the benchmark's images, so a score "
                  "comes from the model's prior over the texts. A pairwise split's chance is 50; a text-only column (SugarCrepe++ "
                  "TOT) reads no image, so its image-grounded part is 0 by construction.", "", _markdown(blind), "",
                  "Image-grounded = accuracy − blind, in points (— where the benchmark scored one image: its blind score is "
                  "the real one by construction):", "", _markdown(grounded), ""]
    if comparisons:
        rows = [frame.assign(row=about["model"]) for frame, about, _ in comparisons]
        with atomic_path(out / "paper.csv") as tmp:  # one table: a line per column of each paper row compared
            pd.concat(rows).to_csv(tmp, float_format="%.2f")
        text = "\n\n".join(paper_markdown(*comparison) for comparison in comparisons)
        with atomic_path(out / "paper.md") as tmp:
            tmp.write_text(text + "\n", encoding="utf-8")
        parts += [f"## Against the {comparisons[0][1]['paper']} paper", "", text, ""]
    with atomic_path(out / "report.md") as tmp:
        tmp.write_text("\n".join(parts), encoding="utf-8")
    if html:
        from .gallery import write_gallery

        write_gallery(items, out / "report.html", figures)
    return out / "report.md"


def _items_of(folders: list[str | Path], names: dict[str, str], data_root: str | Path | None = None) -> pd.DataFrame | None:
    """Every model's per-item results under its name, or None where a folder has none (results of an older compclip)."""
    if not all(any(Path(f).glob(f"*{ITEMS_SUFFIX}")) for f in folders):
        return None
    items = items_frame(folders, data_root)
    return items.assign(model=items["model"].map(names))


def paired_section(items: pd.DataFrame, models: list[str], out: Path) -> list[str]:
    """Each model against the first, item by item (`compare`), as a report section and `OUT/paired.csv`."""
    from .compare import compare, left_out, markdown, table

    differences, unpaired = [], {}
    for other in models[1:]:
        try:
            differences += compare(items.assign(run=0), models[0], other)
        except UsageError as e:  # other items under the same names (another split of the data, say): said, not paired
            unpaired[other] = str(e)
    with atomic_path(out / "paired.csv") as tmp:
        table(differences).to_csv(tmp, index=False)
    parts = [f"## Paired differences against {markdown_text(models[0])}", "",
             "Each model against the first on the items both scored: B − A in points with its 95 % paired-bootstrap interval "
             "(10,000 draws of the items, seed 0), `*` where it excludes zero and the discordant items are enough to tell; the "
             "discordant items, McNemar's exact p and that p Holm-adjusted over the model's splits "
             "(`compclip compare` says more).", ""]
    for other in models[1:]:
        mine = [d for d in differences if d.b == other]
        said = (f"not paired: {markdown_text(unpaired[other])}." if other in unpaired
                else markdown(mine, left_out(items, models[0], other, mine)))
        parts += [f"**{markdown_text(other)}**", "", said, ""]
    return parts
