"""A Lightning callback that records training steps N-M with tracelens's settings and
writes the report when `fit` ends:

    from tracelens.integrations.lightning import TracelensCallback
    trainer = L.Trainer(callbacks=[TracelensCallback(steps="5-24")])
    trainer.fit(model, datamodule)

A step is one training batch (`on_train_batch_end`); the recording starts when training
starts (`on_train_start`: the sanity check and the model's set-up stay out) and the report
is made at `on_train_end`, or when `fit` fails (`on_exception`), the trace kept either way.
Importing this module imports Lightning (`lightning`, else `pytorch_lightning`), nothing
else in tracelens does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracelens.capture.window import MAX_EVENTS
from tracelens.integrations.record import DEFAULT_STEPS, RecordSettings, StepRecorder, parse_steps

try:
    from lightning.pytorch import Callback
except ImportError:  # the older package name
    from pytorch_lightning import Callback  # type: ignore[assignment]


class TracelensCallback(Callback):  # type: ignore[misc]
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
    ) -> None:
        super().__init__()
        self.settings = RecordSettings(
            steps=parse_steps(steps), out=Path(out) if out is not None else None, out_dir=Path(out_dir),
            report=report, record_shapes=record_shapes, with_stack=with_stack, nvml=nvml, max_events=max_events,
            name="lightning", integration="lightning", optimizer_steps=False,
        )  # fmt: skip
        self.recorder: StepRecorder | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if getattr(trainer, "global_rank", 0) != 0 and self.settings.out is None:
            # One trace per rank, named by it, as `tracelens capture` under torchrun does.
            self.settings.name = f"lightning-rank{trainer.global_rank}"
        self.recorder = StepRecorder(self.settings).start()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.recorder is not None:
            self.recorder.step()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.recorder is not None:
            self.recorder.close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if self.recorder is not None:
            self.recorder.close()

    @property
    def trace(self) -> Path | None:
        return self.recorder.trace if self.recorder is not None else None
