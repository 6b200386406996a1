"""How ``--sampling`` draws each token (``SamplingMethod``), parsed without JAX so that a bad
value is refused before a model loads; ``seq2seq.decoding.sampling`` draws with it.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class SamplingMethod:
    """``topk:K`` (the K most probable tokens) or ``topp:P`` (the nucleus of mass P)."""

    kind: str  # "topk" or "topp"
    value: float  # K (a whole number >= 1) or P (in (0, 1])

    @classmethod
    def parse(cls, text: str) -> SamplingMethod:
        """``topk:10`` or ``topp:0.9``; raises ValueError with one line naming the fix."""
        kind, _, value = text.partition(":")
        example = "e.g. topk:10 or topp:0.9"
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"--sampling {text!r} is not KIND:VALUE; {example}") from None
        if kind == "topk" and number >= 1 and number == int(number):
            return cls(kind, int(number))
        if kind == "topp" and 0 < number <= 1:
            return cls(kind, number)
        if kind in ("topk", "topp"):
            what = "a whole number >= 1" if kind == "topk" else "a probability in (0, 1]"
            raise ValueError(f"--sampling {text}: {kind} takes {what}; {example}")
        raise ValueError(f"--sampling {text}: unknown method {kind!r}; use topk:K or topp:P")
