"""Where a run's figures go (rank 0): `log.jsonl` always, and the loggers of `--report-to`, as open_clip_train names them:
TensorBoard's event files under OUT/tensorboard, a W&B run under OUT/wandb (offline under WANDB_MODE=offline)."""
from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..extras import need
from ..io import append_line, atomic_path

WANDB_ID_NAME = "wandb_id"  # the W&B run of this folder: a resumed run logs into the same one


class Reporters:
    def __init__(self, out: Path, reporters: list[str], config: dict[str, Any], project: str):
        self.out, self.tb, self.wandb = out, None, None
        if "tensorboard" in reporters:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(out / "tensorboard"))
        if "wandb" in reporters:
            self.wandb = _wandb_run(out, config, project)

    def log(self, record: dict[str, Any]) -> None:
        """One line of `log.jsonl`, and its numbers to the loggers at `record["step"]`."""
        append_line(self.out / "log.jsonl", json.dumps(record))
        scalars = {k: v for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"}
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


def _wandb_run(out: Path, config: dict[str, Any], project: str):
    """The folder's W&B run, named after it, made on its first start and resumed on the next ones."""
    need("wandb", "--report-to wandb")
    import wandb

    id_file = out / WANDB_ID_NAME
    if not id_file.is_file():
        with atomic_path(id_file) as tmp:
            tmp.write_text(uuid.uuid4().hex[:8])  # W&B's own ids are 8 characters of [a-z0-9]
    try:
        return wandb.init(project=project, name=out.name, id=id_file.read_text().strip(), resume="allow", dir=str(out), config=config)
    except wandb.errors.Error as e:  # no API key, no network on a compute node: W&B's own words, then what to do
        said = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(f"--report-to wandb: W&B did not start ({said}); run `wandb login`, or set WANDB_MODE=offline to log "
                         f"into {out / 'wandb'} and `wandb sync` it later") from None
