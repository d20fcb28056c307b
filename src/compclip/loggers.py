"""The loggers a run's or an evaluation's figures go to, as open_clip_train names them (`--report-to`): TensorBoard's
event files under OUT/tensorboard, a W&B run under OUT/wandb (offline under WANDB_MODE=offline). Light to import: the
loggers themselves load when a run starts one."""
from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from .errors import UsageError
from .extras import need
from .io import atomic_path

REPORTERS = ("tensorboard", "wandb")
WANDB_ID_NAME = "wandb_id"  # the W&B run of this folder: a resumed run logs into the same one


def parse_reporters(text: str, flag: str = "--report-to") -> list[str]:
    """`tensorboard,wandb` as a list (none: no logger), an unknown name refused."""
    chosen = [r.strip() for r in text.split(",") if r.strip() and r.strip() != "none"]
    unknown = [r for r in chosen if r not in REPORTERS]
    if unknown:
        raise UsageError(f"{flag} {text}: no logger {unknown[0]!r}; known: {', '.join(REPORTERS)} or none")
    return chosen


def tensorboard_writer(out: Path):
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(out / "tensorboard"))


def wandb_run(out: Path, config: dict[str, Any], project: str):
    """The folder's W&B run, named after it, made on its first start and resumed on the next ones."""
    need("wandb", "--report-to wandb")
    import wandb

    id_file = out / WANDB_ID_NAME
    if not id_file.is_file():
        with atomic_path(id_file) as tmp:
            tmp.write_text(uuid.uuid4().hex[:8])  # W&B's own ids are 8 characters of [a-z0-9]
    where = Path(os.environ.get("WANDB_DIR") or out)  # W&B's own variable wins, as it does for open_clip_train
    try:
        return wandb.init(project=project, name=out.name, id=id_file.read_text().strip(), resume="allow", dir=str(where), config=config)
    except wandb.errors.Error as e:  # no API key, no network on a compute node: W&B's own words, then what to do
        said = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(f"--report-to wandb: W&B did not start ({said}); run `wandb login`, or set WANDB_MODE=offline to log "
                         f"into {where / 'wandb'} and `wandb sync` it later") from None
