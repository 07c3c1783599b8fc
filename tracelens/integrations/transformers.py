"""A transformers `TrainerCallback` that records training steps N-M with tracelens's
settings and writes the report when training ends:

    from tracelens.integrations.transformers import TracelensTrainerCallback
    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[TracelensTrainerCallback(steps="5-24")])
    trainer.train()

A step is one optimizer step (`on_step_end`, after the gradient-accumulation steps); the
recording starts at `on_train_begin` and the report is made at `on_train_end`. Only the
main process records (`state.is_world_process_zero`) unless `all_ranks=True`, which names
each rank's trace by its rank. Importing this module imports transformers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from tracelens.capture.window import MAX_EVENTS
from tracelens.integrations.record import DEFAULT_STEPS, RecordSettings, StepRecorder, parse_steps


class TracelensTrainerCallback(TrainerCallback):  # type: ignore[misc]
    def __init__(
        self,
        steps: str | tuple[int, int] | range = DEFAULT_STEPS,
        *,
        out: str | Path | None = None,
        out_dir: str | Path = "reports",
        report: bool = True,
        record_shapes: bool = True,
        with_stack: bool = True,
        nvml: bool = True,
        max_events: int | None = MAX_EVENTS,
        all_ranks: bool = False,
    ) -> None:
        self.settings = RecordSettings(
            steps=parse_steps(steps), out=Path(out) if out is not None else None, out_dir=Path(out_dir),
            report=report, record_shapes=record_shapes, with_stack=with_stack, nvml=nvml, max_events=max_events,
            name="trainer", integration="transformers", optimizer_steps=False,
        )  # fmt: skip
        self.all_ranks = all_ranks
        self.recorder: StepRecorder | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        main = bool(getattr(state, "is_world_process_zero", True))
        if not main and not self.all_ranks:
            return
        rank = int(getattr(args, "process_index", 0) or 0)
        if rank and self.settings.out is None:
            self.settings.name = f"trainer-rank{rank}"
        self.recorder = StepRecorder(self.settings).start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.recorder is not None:
            self.recorder.step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.recorder is not None:
            self.recorder.close()

    @property
    def trace(self) -> Path | None:
        return self.recorder.trace if self.recorder is not None else None
