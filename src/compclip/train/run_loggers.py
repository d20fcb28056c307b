"""Where a run's figures go (rank 0): `log.jsonl` always, and the loggers of `--report-to` (`compclip.loggers`)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..io import append_line
from ..loggers import tensorboard_writer, wandb_run


class RunLoggers:
    """log.jsonl and the --report-to loggers of one run, written by rank 0 at each logged step."""

    def __init__(self, out: Path, reporters: list[str], config: dict[str, Any], project: str):
        self.out, self.tb, self.wandb = out, None, None
        if "tensorboard" in reporters:
            self.tb = tensorboard_writer(out)
        if "wandb" in reporters:
            self.wandb = wandb_run(out, config, project)

    def log(self, record: dict[str, Any]) -> None:
        """One line of `log.jsonl`, and its numbers to the loggers at `record["step"]`, under open_clip_train's tags: a
        training figure as `train/<name>`, the evaluations' already under `val/` and `eval/`."""
        append_line(self.out / "log.jsonl", json.dumps(record))
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
