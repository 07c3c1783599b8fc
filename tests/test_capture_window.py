"""The recording window's decisions (tracelens.capture.window), without torch: which
part of a run `tracelens capture` records by default and with --steps/--window/--all."""

from __future__ import annotations

from tracelens.capture.window import (
    DURATION_S,
    FIRST_STEP_GRACE,
    FRAMEWORK_WARMUP_S,
    STEPS,
    WARMUP_S,
    WARMUP_STEPS,
    Action,
    Limits,
    Mode,
    Phase,
    Window,
    loaded_framework,
)


def _steps(w: Window, n: int, t0: float = 1.0, dt: float = 0.01) -> list[Action]:
    out = []
    for i in range(n):
        if w.accept("optimizer"):
            out.append(w.step(t0 + i * dt))
    return out


def test_default_skips_the_warm_up_and_records_twenty_steps() -> None:
    w = Window(Limits())
    assert w.begin() is Action.START and w.phase is Phase.PROVISIONAL
    acts = _steps(w, 40)
    assert acts[WARMUP_STEPS - 1] is Action.START  # the 5th mark ends the warm-up
    assert acts[WARMUP_STEPS + STEPS - 1] is Action.STOP  # 20 steps later
    assert w.kept is not None and (w.kept.kind, w.kept.first_step, w.kept.last_step) == ("steps", 5, 25)
    assert w.provisional is not None and w.provisional.kind == "start"
    assert set(acts[WARMUP_STEPS + STEPS :]) == {Action.NONE}


def test_duration_ends_slow_steps_early() -> None:
    w = Window(Limits(duration_s=2.0))
    w.begin()
    acts = _steps(w, 30, dt=0.5)
    assert Action.STOP in acts and w.kept is not None and w.kept.reason == "2 s"
    assert w.kept.last_step is not None and w.kept.last_step - w.kept.first_step < STEPS


def test_the_cap_counts_from_when_the_profiler_runs() -> None:
    """Under load the profiler's start took 7-52 s: the cap starts when it is running
    (the H200 box's 15 scenario runs whose trace held no torch op)."""
    w = Window(Limits())
    w.begin()
    acts = _steps(w, WARMUP_STEPS, t0=0.1)
    assert acts[-1] is Action.START
    w.started(10.5)  # the start returned 10.4 s later
    assert w.next_deadline() == 10.5 + DURATION_S * FIRST_STEP_GRACE  # no step inside yet
    assert w.tick(11.0) is Action.NONE
    assert w.accept("optimizer") and w.step(11.2) is Action.STEP
    assert w.next_deadline() == 10.5 + DURATION_S  # a step is held: the plain cap
    assert w.tick(10.5 + DURATION_S) is Action.STOP
    assert w.kept is not None and w.kept.last_step == WARMUP_STEPS + 1


def test_a_step_longer_than_the_cap_is_waited_for_up_to_the_grace() -> None:
    w = Window(Limits(duration_s=2.0))
    w.begin()
    _steps(w, WARMUP_STEPS)
    assert w.current is not None
    t_start = w.current.t_start
    assert w.tick(t_start + 2.0) is Action.NONE  # the first step inside is not over yet
    assert w.tick(t_start + 2.0 * FIRST_STEP_GRACE) is Action.STOP  # but not for ever
    assert w.kept is not None and w.kept.reason == "2 s"


def test_no_marks_records_by_time_and_later_marks_take_over() -> None:
    w = Window(Limits())
    w.begin()
    assert w.tick(3.0) is Action.SET_ASIDE and w.phase is Phase.WAITING  # the start, set aside
    assert w.next_deadline() == WARMUP_S
    assert w.tick(WARMUP_S) is Action.START and w.time_mode
    assert w.tick(WARMUP_S + 10.0) is Action.STOP and w.kept is not None and w.kept.kind == "time"
    # marks after all (a long model build): a step recording supersedes the time one
    acts = _steps(w, 30, t0=20.0)
    assert Action.START in acts and w.kept.kind == "steps"


def test_a_module_call_in_progress_blocks_the_time_window() -> None:
    """A first forward that compiles for a minute: no time-based recording of the compile."""
    w = Window(Limits())
    w.begin()
    w.step_begun = True
    assert w.tick(3.0) is Action.SET_ASIDE
    assert w.next_deadline() is None and w.tick(30.0) is Action.NONE
    assert w.accept("forward") and w.step(60.0) is Action.NONE  # mark 1, still warming up


def test_higher_precedence_marks_win_and_restart_the_count() -> None:
    w = Window(Limits())
    w.begin()
    assert w.accept("forward")
    w.step(0.5)
    assert w.accept("optimizer") and w.steps == 0  # the count restarts with the winner
    w.step(0.6)
    assert not w.accept("forward") and w.steps == 1
    assert w.accept("explicit") and not w.accept("optimizer")


def test_steps_range_and_time_window_and_all() -> None:
    w = Window(Limits(mode=Mode.STEPS, warmup_steps=3, steps=2, duration_s=None))
    assert w.begin() is Action.NONE
    acts = _steps(w, 10)
    assert acts[2] is Action.START and acts[3] is Action.STEP and acts[4] is Action.STOP
    w = Window(Limits(mode=Mode.STEPS, warmup_steps=50, steps=11, duration_s=None))
    w.begin()
    _steps(w, 20)
    assert w.finish(1.0, "end of script") is Action.NONE and w.kept is None  # range past the run
    w = Window(Limits(mode=Mode.TIME, window_s=(1.0, 2.0), duration_s=None, steps=None))
    w.begin()
    assert w.next_deadline() == 1.0 and w.tick(1.0) is Action.START and w.tick(2.0) is Action.STOP
    w = Window(Limits(mode=Mode.ALL, steps=None, duration_s=None, max_events=None))
    assert w.begin() is Action.START and w.tick(1e6) is Action.NONE
    assert w.finish(1e6, "end of script") is Action.STOP and w.kept is not None and w.kept.kind == "all"


def test_limits_are_described() -> None:
    assert "steps 5-24 after a warm-up" in Limits().describe()
    assert "--all" in Limits().describe()
    assert (
        Limits(mode=Mode.STEPS, warmup_steps=10, steps=5, duration_s=None)
        .describe()
        .startswith("recording steps 10-14")
    )


def test_a_framework_script_waits_longer_for_its_first_step() -> None:
    """A script that imported Lightning/transformers/... is not recorded by time during
    its set-up (window.FRAMEWORK_WARMUP_S): its steps come later; a plain script is."""
    assert loaded_framework(["torch", "numpy", "lightning.pytorch", "lightning"]) == "lightning"
    assert loaded_framework(["torch", "torchvision", "numpy"]) is None
    w = Window(Limits())
    w.begin()
    w.framework = "lightning"
    assert w.tick(3.0) is Action.SET_ASIDE
    assert w.next_deadline() == FRAMEWORK_WARMUP_S
    assert w.tick(WARMUP_S + 1) is Action.NONE and w.phase is Phase.WAITING  # not recorded by time
    acts = _steps(w, 30, t0=40.0)  # Lightning's first steps at 40 s: recorded by steps as usual
    assert w.kept is not None and (w.kept.kind, w.kept.first_step, w.kept.last_step) == ("steps", 5, 25)
    assert Action.START in acts
    # A set-up longer than that still gets its time recording.
    w2 = Window(Limits())
    w2.begin()
    w2.framework = "transformers"
    w2.tick(3.0)
    assert w2.tick(FRAMEWORK_WARMUP_S + 0.1) is Action.START and w2.current is not None
    assert w2.current.kind == "time"
    # Without a framework the time start is at WARMUP_S, as before.
    w3 = Window(Limits())
    w3.begin()
    w3.tick(3.0)
    assert w3.tick(WARMUP_S) is Action.START
