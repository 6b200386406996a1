"""Which checkpoint of a run to use: the rule ``latest`` | ``best`` | ``STEP`` | ``average:K``.

* ``latest``: the newest saved step;
* ``best``: the saved step with the highest validation BLEU (ties: the later step);
* ``STEP``: that step, by number;
* ``average:K``: the element-wise mean of the parameters of the newest K checkpoints, as
  Vaswani et al. 2017 (Section 6.1) evaluate: "a single model obtained by averaging the last 5
  checkpoints" (base) and the last 20 (big). A checkpoint that an interruption wrote off
  schedule is not among them once the run has saved a later one (``seq2seq.checkpoints.store``
  deletes it), so an interrupted run averages what an uninterrupted one does.

This module owns the rule: its help text (``rules_help``), parsing it, the file names of scores
under it, and resolving it against a run's saved steps (``resolve``; reading those from a run
directory is ``seq2seq.evaluation.restore.choose_checkpoints``). It reads no files.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence


def rules_help(steps: bool = True) -> str:
    """The rules, as flags' help and error messages list them; ``steps=False`` leaves out step
    numbers (a comparison applies one rule to runs whose steps differ)."""
    step = "a step number such as 1000, " if steps else ""
    return (
        f"'latest', 'best' (highest validation BLEU), {step}or 'average:K' (the parameter mean "
        "of the last K checkpoints; train with checkpoint.keep >= K)"
    )


class CheckpointError(ValueError):
    """The checkpoints asked for are missing or do not fit the model; one line says which."""


@dataclasses.dataclass(frozen=True)
class CheckpointRule:
    """A parsed rule: ``kind`` is "latest", "best", "step" or "average"; ``number`` the step
    or K."""

    kind: str
    number: int | None = None

    @classmethod
    def parse(cls, text: str | int) -> CheckpointRule:
        """The rule ``text`` names.

        Raises:
          CheckpointError: ``text`` is no rule; the message lists the rules.
        """
        text = str(text).strip()
        if text in ("latest", "best"):
            return cls(text)
        if text.isdigit():
            return cls("step", int(text))
        match = re.fullmatch(r"average:([1-9][0-9]*)", text)
        if match:
            return cls("average", int(match.group(1)))
        if re.fullmatch(r"average:0+", text):
            raise CheckpointError(
                f"--checkpoint={text!r} averages no checkpoint; K must be at least 1"
            )
        raise CheckpointError(f"--checkpoint={text!r} is not understood; use {rules_help()}")

    def __str__(self) -> str:
        if self.kind == "step":
            return str(self.number)
        return f"average:{self.number}" if self.kind == "average" else self.kind

    @property
    def file_suffix(self) -> str:
        """What the names of scores under this rule carry: "" for ``latest``; ``@best``,
        ``@average5``, ``@step1500`` for the others, so that scoring a run two ways keeps both."""
        if self.kind == "latest":
            return ""
        return "@" + (self.kind if self.kind == "best" else f"{self.kind}{self.number}")


def average_count(text: str) -> int | None:
    """K of ``average:K`` (K >= 1); None for any other text."""
    try:
        rule = CheckpointRule.parse(text)
    except CheckpointError:
        return None
    return rule.number if rule.kind == "average" else None


@dataclasses.dataclass(frozen=True)
class CheckpointChoice:
    """``steps``: the checkpoints whose parameters are averaged (one step: no averaging)."""

    steps: tuple[int, ...]
    averaged_from: dict | None = None  # the record ``seq2seq.evaluation.average`` wrote

    def describe(self) -> str:
        if len(self.steps) > 1:
            return f"average of the last {len(self.steps)}: steps {', '.join(map(str, self.steps))}"
        if self.averaged_from:
            steps = ", ".join(map(str, self.averaged_from["steps"]))
            source = self.averaged_from["workdir"]
            return f"step {self.steps[0]}, the average of steps {steps} of {source}"
        return f"step {self.steps[0]}"


# Which checkpoint of every run a comparison scores, and how its report says it; ``average:K``
# scores the mean of each run's last K, as Vaswani et al. evaluate their base (5) and big (20).
CHECKPOINTS = {
    "latest": "each run's last",
    "best": "each run's best by validation BLEU",
}


def describe_checkpoint_rule(rule: str) -> str:
    """How the report names ``rule`` (a key of CHECKPOINTS or ``average:K``).

    Raises:
      ValueError: any other rule (a step number would name a different point of every run).
    """
    if rule in CHECKPOINTS:
        return CHECKPOINTS[rule]
    if (count := average_count(rule)) is not None:
        return f"the parameter mean of each run's last {count}"
    if re.fullmatch(r"average:0+", rule):
        raise ValueError(f"checkpoint={rule!r} averages no checkpoint; K must be at least 1")
    raise ValueError(
        f"checkpoint={rule!r}: a comparison applies one rule to every run, use one of "
        f"{', '.join(CHECKPOINTS)} or average:K (the mean of each run's last K checkpoints)"
    )


def resolve(
    rule: str | CheckpointRule,
    available: Sequence[int],
    *,
    validation_bleu: Mapping[int, float],
    where: str,
    keep: int | None = None,
    averaged_from: dict | None = None,
) -> CheckpointChoice:
    """The checkpoints ``rule`` picks among the saved steps ``available``.

    Args:
      rule: the rule, or its text.
      available: the run's saved steps, in any order.
      validation_bleu: validation BLEU by step (what ``best`` chooses by).
      where: the run's directory, for messages.
      keep: the run's ``checkpoint.keep``. A run keeps its newest ``keep`` checkpoints plus its
        best validated one, which may be much older: ``average:K`` averages the newest K only.
      averaged_from: the record of a run written by ``seq2seq.evaluation.average`` (kept in
        the choice).

    Raises:
      CheckpointError: no such rule, no checkpoint, or not the ones the rule needs.
    """
    rule = rule if isinstance(rule, CheckpointRule) else CheckpointRule.parse(rule)
    available = sorted(available)
    if not available:
        raise CheckpointError(f"no checkpoint in {where}; train first")
    if rule.kind == "latest":
        return CheckpointChoice((available[-1],), averaged_from)
    if rule.kind == "best":
        return CheckpointChoice((best_step(available, validation_bleu, where),), averaged_from)
    if rule.kind == "step":
        if rule.number not in available:
            raise CheckpointError(
                f"no checkpoint at step {rule.number} in {where}; saved steps: "
                f"{', '.join(map(str, available))}"
            )
        return CheckpointChoice((rule.number,), averaged_from)
    newest = available[-keep:] if keep else available
    if rule.number > len(newest):
        # Kept fewer than K (keep < K), or saved fewer: a short run has not reached K saves.
        fix = (
            "lower K or raise config.checkpoint.keep when training"
            if keep and keep < rule.number
            else "lower K, or give the run more saves (train it longer, or save more often: "
            "config.checkpoint.every_steps)"
        )
        raise CheckpointError(
            f"--checkpoint={rule} needs the last {rule.number} checkpoints but {where} holds "
            f"{len(newest)} (steps {', '.join(map(str, newest))}); {fix}"
        )
    return CheckpointChoice(tuple(newest[-rule.number :]))


def best_step(available: Sequence[int], validation_bleu: Mapping[int, float], where: str) -> int:
    """The saved step with the highest validation BLEU; ties go to the later step.

    The trainer checkpoints every step it validates and always keeps the one with the best
    BLEU, so this is the run's best validated step; a run trained without validation has no
    record to choose by.

    Raises:
      CheckpointError: no saved step has a validation BLEU.
    """
    scored = [step for step in available if step in validation_bleu]
    if not scored:
        raise CheckpointError(
            f"--checkpoint=best: no saved checkpoint of {where} has a validation BLEU record "
            f"(saved steps: {', '.join(map(str, available))}); use 'latest' or a step number"
        )
    return max(scored, key=lambda step: (validation_bleu[step], step))
