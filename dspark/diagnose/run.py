"""Running a diagnosis: measure the drafter on a few prompts as the person asked, measure again
only where a check needs a comparison (greedy against sampling, with the chat template against
without, the other conventions of a published checkpoint), then run the checks.

Everything runs on the calling thread (MLX arrays belong to the thread that made them): the app
calls :func:`diagnose` on its model-owner thread, with ``progress`` and ``cancel`` callbacks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from ..config import GenerationConfig
from ..drafter_profile import Profile, measured, target_fingerprint
from ..errors import DsparkError
from . import style
from .acceptance import Measurement, accepted_within, measure
from .checks import FAR_BELOW, Facts, run_checks
from .findings import Diagnosis, ordered

#: Other conventions of a published checkpoint are tried only when position-1 acceptance is under
#: this (or far below the profile): a drafter read the wrong way accepts little, so a healthy one
#: is not measured again. Not when its training measured it on these weights (below).
LOW_FIRST = 0.5

Progress = Callable[[int, int, str], None]


class _Steps:
    """Counts generations for ``progress(done, total, what)``; the total grows when a check needs
    another pass (it is known once the main pass shows what the run needs)."""

    def __init__(self, progress: Progress | None, per_pass: int, passes: int):
        self.progress, self.per_pass, self.done, self.total = progress, per_pass, 0, per_pass * passes

    def more(self, passes: int) -> None:
        self.total += passes * self.per_pass

    def __call__(self, what: str) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total, what)


def check_drafts(config: GenerationConfig) -> None:
    """Refuse a block size of 0: it decodes plainly, so no round drafts and a diagnosis would
    report tau 0 and no finding, as though the drafter were fine."""
    if config.block_size == 0:
        raise DsparkError(
            "block-size 0 drafts nothing, so there is nothing to diagnose: give 1 to 64, or leave it "
            "out for the drafter's own"
        )


def _checked(target, prompts: Sequence, config: GenerationConfig) -> list:
    prompts = list(prompts)
    if not prompts:
        raise DsparkError("no prompts to diagnose with")
    config.check(target.dims.vocab_size)
    check_drafts(config)
    return prompts


def diagnose(
    target,
    drafter,
    prompts: Sequence,
    config: GenerationConfig = GenerationConfig(),
    *,
    profile: Profile | None = None,
    progress: Progress | None = None,
    cancel: Callable[[], bool] | None = None,
) -> Diagnosis:
    """Measure ``drafter`` with ``target`` on ``prompts`` (texts or token-id lists) under
    ``config`` (every draft verified), compare with ``profile`` (``profile.find``) and say what
    lowers acceptance, most severe first."""
    prompts = _checked(target, prompts, config)
    greedy_config = dataclasses.replace(config, temperature=0.0)
    templated, thinking = style.run_style(target, config, prompts)
    needs_template = target.has_chat_template and not templated and any(isinstance(p, str) for p in prompts)
    steps = _Steps(progress, len(prompts), 1 + (config.temperature > 0) + needs_template)
    main = measure(target, drafter, prompts, config, step=steps, cancel=cancel, what="as asked")
    greedy = (
        main
        if config.temperature <= 0
        else measure(target, drafter, prompts, greedy_config, step=steps, cancel=cancel, what="greedy")
    )
    with_template = (
        measure(
            target,
            drafter,
            prompts,
            dataclasses.replace(greedy_config, chat_template=True),
            step=steps,
            cancel=cancel,
            what="with the chat template",
        )
        if needs_template
        else None
    )
    tried, now = _conventions(
        target, drafter, prompts, greedy_config, greedy=greedy, profile=profile, steps=steps, cancel=cancel
    )
    facts = Facts(
        main=main,
        greedy=greedy,
        temperature=config.temperature,
        block_size=config.block_size or drafter.block_size,
        trained_block=trained_drafts(drafter),
        target_fingerprint=target_fingerprint(target),
        recorded_fingerprint=(profile.target_fingerprint if profile is not None else None)
        or getattr(drafter, "target_weights", None),
        target_digest=target.weights_digest,
        recorded_digest=profile.target_digest if profile is not None else None,
        profile=profile,
        has_template=target.has_chat_template,
        templated=templated,
        thinking=thinking,
        with_template=with_template,
        conventions=tuple(tried),
        current_conventions=now,
        kind_templated=kind_trained_templated(drafter),
    )
    return Diagnosis(
        findings=ordered(run_checks(facts)),
        per_position_acceptance=main.per_position,
        expected_per_position=profile.per_position_acceptance if profile is not None else None,
        tau=main.tau,
        rounds=main.rounds,
        prompts=len(prompts),
        profile_source=profile.source if profile is not None else None,
    )


def trained_drafts(drafter) -> int | None:
    """Drafts a round the drafter was trained to make: its block (a DFlash 2 head runs a block that
    may be smaller than the one it was trained with, its ``dflash_config.block_size`` slots, the
    anchor's included); None for an autoregressive drafter (EAGLE-3, the Gemma-4 assistant), which
    drafts a token a step for as many steps as the policy asks."""
    from ..loading import AUTOREGRESSIVE  # noqa: PLC0415 (slow: mlx)

    if drafter.format in AUTOREGRESSIVE:
        return None
    trained = getattr(getattr(drafter, "spec", None), "trained_block", None)
    return trained - 1 if trained else drafter.block_size


def kind_trained_templated(drafter) -> str | None:
    """The drafter's kind when the kind itself says it was trained on chat-formatted text: Google
    trained the Gemma-4 assistants on the -it models' chat text (their published model cards run
    them through the chat template); None for every other kind (its profile says, if anything)."""
    from ..formats import assistant  # noqa: PLC0415 (slow: mlx)
    from ..loading import drafter_kind  # noqa: PLC0415 (slow: mlx)

    return drafter_kind(drafter) if drafter.format == assistant.FORMAT else None


def _looks_low(greedy: Measurement, profile: Profile | None, target) -> bool:
    """Whether acceptance is low enough that another reading convention may explain it. A profile
    its own training measured on these very weights was measured under the reading the weights
    were trained with: then only far below it is low (the demo's DFlash-style drafter, 0.49 at
    position 1 as trained, was otherwise measured three more times under readings it never had);
    any other drafter is also low under ``LOW_FIRST`` at position 1."""
    trained_here = (
        profile is not None
        and profile.source == "training"
        and profile.target_fingerprint == target_fingerprint(target)
    )
    if greedy.first < LOW_FIRST and not trained_here:
        return True
    if profile is None:
        return False
    m = min(len(profile.per_position_acceptance), len(greedy.per_position))
    return accepted_within(greedy.per_position, m) < FAR_BELOW * accepted_within(profile.per_position_acceptance, m)


def _conventions(target, drafter, prompts, greedy_config, *, greedy: Measurement, profile, steps: _Steps, cancel):
    """([(name, value, Measurement)] for each other reading tried, the current reading): only for a
    published checkpoint whose acceptance looks low (the ``greedy`` pass against ``profile``),
    each reading measured greedy (``greedy_config``) on ``prompts``, counted by ``steps`` and stopped
    by ``cancel``. A window rule is not tried when no context reached the windows (both rules
    then read the same rows)."""
    from ..formats import conventions  # noqa: PLC0415 (slow: mlx)
    from ..formats.base import CheckpointDrafter  # noqa: PLC0415 (slow: mlx)

    if not isinstance(drafter, CheckpointDrafter) or not _looks_low(greedy, profile, target):
        return [], None
    options = conventions.alternatives(drafter.spec, target.dims.hidden_size)
    narrowest = min((w for w in drafter.spec.layout.windows if w), default=None)
    reach = greedy.max_position + (greedy_config.block_size or drafter.block_size) + 1
    options = [(n, v) for n, v in options if n != "window_from_anchor" or (narrowest and reach > narrowest - 1)]
    steps.more(len(options))
    tried = []
    for name, value in options:
        try:
            other = conventions.variant(drafter, name, value)
        except DsparkError:
            continue
        config = (
            greedy_config if greedy_config.block_size is None else dataclasses.replace(greedy_config, block_size=None)
        )
        tried.append(
            (
                name,
                value,
                measure(target, other, prompts, config, step=steps, cancel=cancel, what=f"read with {name} = {value}"),
            )
        )
    return tried, conventions.current(drafter.spec)


def record(
    target,
    drafter,
    prompts: Sequence,
    config: GenerationConfig = GenerationConfig(),
    *,
    progress: Progress | None = None,
    cancel: Callable[[], bool] | None = None,
) -> Profile:
    """A profile measured now: greedy, every draft verified, the prompt style as ``config`` makes
    it (``dspark diagnose --record``; the caller stores it with ``profile.write_recorded``)."""
    prompts = _checked(target, prompts, config)
    greedy_config = dataclasses.replace(config, temperature=0.0)
    m = measure(
        target, drafter, prompts, greedy_config, step=_Steps(progress, len(prompts), 1), cancel=cancel, what="recording"
    )
    if not m.per_position:
        raise DsparkError("no round drafted on these prompts: nothing to record (give more --max-tokens)")
    templated, thinking = style.run_style(target, config, prompts)
    return measured(
        m.per_position,
        target,
        block_size=greedy_config.block_size or drafter.block_size,
        templated=templated,
        thinking=thinking,
        context_length=None,
        source="recorded",
        prompts=len(prompts),
        rounds=m.rounds,
    )


__all__ = ["check_drafts", "diagnose", "record"]
