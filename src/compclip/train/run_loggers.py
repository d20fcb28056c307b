"""Where a run's figures go (rank 0): `log.jsonl` always, open_clip_train's line of each logged step (OUT/train.log, and
stderr where it is no terminal: what `tail -f` on a SLURM log shows), and the loggers of `--report-to`
(`compclip.loggers`)."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ..io import append_line
from ..loggers import tensorboard_writer, wandb_run
from ..progress import ON_THE_BAR

log = logging.getLogger("compclip.train")

# a record's keys that are no loss term (the method's terms are named by the method: siglip, npc, ...)
NOT_LOSS_TERMS = ("step", "epoch", "loss", "lr", "scale", "samples_per_second", "samples_per_second_per_gpu", "batch_time",
                  "data_time", "grad_norm", "concept_coverage")


def step_line(record: dict[str, Any], steps: int) -> str:
    """open_clip_train's line of a logged step (`Train Epoch: ... LR: ... Logit Scale: ... Loss: ...`), counted in steps
    where it counts an epoch's samples, each loss term by its method's name."""
    step, digits = record["step"], len(str(steps))
    terms = " ".join(f"{name.capitalize()}: {record[name]:#.5g}" for name in record
                     if name not in NOT_LOSS_TERMS and "/" not in name and isinstance(record[name], float))
    return (f"Train Epoch: {record['epoch']} [{step:>{digits}}/{steps} ({100 * step / steps:.0f}%)] "
            f"Data (t): {record['data_time']:.3f} Batch (t): {record['batch_time']:.3f}, {record['samples_per_second']:#g}/s, "
            f"{record['samples_per_second_per_gpu']:#g}/s/gpu LR: {record['lr']:5f} Logit Scale: {record['scale']:.3f} "
            f"Loss: {record['loss']:#.5g}" + (f" {terms}" if terms else ""))


class RunLoggers:
    """log.jsonl and the --report-to loggers of one run, written by rank 0 at each logged step."""

    def __init__(self, out: Path, reporters: list[str], config: dict[str, Any], project: str, steps: int):
        self.out, self.steps, self.tb, self.wandb = out, steps, None, None
        if "tensorboard" in reporters:
            self.tb = tensorboard_writer(out)
        if "wandb" in reporters:
            self.wandb = wandb_run(out, config, project)

    def log(self, record: dict[str, Any]) -> None:
        """One line of `log.jsonl`, and its numbers to the loggers at `record["step"]`, under open_clip_train's tags: a
        training figure as `train/<name>`, the evaluations' already under `val/` and `eval/`."""
        append_line(self.out / "log.jsonl", json.dumps(record))
        log.info(step_line(record, self.steps), extra={ON_THE_BAR: True})  # a terminal's bar shows it (`Trainer.after_step`)
        scalars = {k if "/" in k else f"train/{k}": v for k, v in record.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"}
        if self.tb is not None:
            for key, value in scalars.items():
                self.tb.add_scalar(key, value, record["step"])
        if self.wandb is not None:
            self.wandb.log(scalars, step=record["step"])

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
