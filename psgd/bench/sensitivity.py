"""Over which range of the time model a verdict holds (DESIGN.md §9: validated
by sensitivity). Given the verdicts at the stated cluster and at a small
one-knob-at-a-time sweep around it (step-time variability, link bandwidth,
compute per step, ...), each verdict gets, per knob, the range of swept values
around the stated one over which it stays the same, and where it changes, the
boundary: "depends on link bandwidth, boundary between 1 and 4 Gb/s".

The knob values come in as data (whatever the simulator's keys are); nothing
here runs anything. A verdict is any string-valued vocabulary
(psgd.bench.verdict.Outcome or ClaimVerdict).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

__all__ = ["Knob", "Boundary", "KnobRange", "ClaimSensitivity", "sensitivity", "sensitivity_table",
           "plot_sensitivity"]


@dataclass(frozen=True)
class Knob:
    name: str            # in words: "link bandwidth"
    unit: str            # "Gb/s"
    stated: float        # the stated cluster's value
    key: str = ""        # the config key it sets, e.g. sim.bandwidth_gbps (for the report)

    def fmt(self, v: float) -> str:
        return f"{v:g}" + (f" {self.unit}" if self.unit else "")


@dataclass(frozen=True)
class Boundary:
    holds_at: float      # the last swept value (from the stated one outwards) where the verdict holds
    flips_at: float      # the next one, where it is different
    becomes: str         # the verdict there


@dataclass(frozen=True)
class KnobRange:
    knob: Knob
    low: float           # the verdict holds for every swept value in [low, high] (the stated one included)
    high: float
    below: Optional[Boundary] = None   # where it changes under `low` (None: it holds to the sweep's end)
    above: Optional[Boundary] = None
    swept: tuple[float, ...] = ()

    @property
    def holds(self) -> bool:
        return self.below is None and self.above is None

    def text(self) -> str:
        k = self.knob
        if self.holds:
            return f"holds for {k.fmt(self.low)} to {k.fmt(self.high)}"
        parts = [f"{b.becomes} at {k.fmt(b.flips_at)}, boundary between {k.fmt(min(b.holds_at, b.flips_at))} and "
                 f"{k.fmt(max(b.holds_at, b.flips_at))}" for b in (self.below, self.above) if b is not None]
        return f"depends on {k.name}: " + "; ".join(parts)


@dataclass(frozen=True)
class ClaimSensitivity:
    claim: str
    verdict: str                               # at the stated cluster
    ranges: list[KnobRange] = field(default_factory=list)

    @property
    def holds(self) -> bool:
        return all(r.holds for r in self.ranges)

    def text(self) -> str:
        if self.holds:
            return f"{self.verdict} across the sweep (" + "; ".join(f"{r.knob.name} {r.text()}"
                                                                   for r in self.ranges) + ")"
        return f"{self.verdict} at the stated cluster; " + "; ".join(r.text() for r in self.ranges if not r.holds)


def _walk(values: list[float], start: int, step: int, verdicts: dict[float, str], want: str
          ) -> tuple[float, Optional[Boundary]]:
    """From values[start] outwards by `step`: the last value where `want` holds, and the boundary after it."""
    i = start
    while 0 <= i + step < len(values):
        nxt = values[i + step]
        if verdicts[nxt] != want:
            return values[i], Boundary(values[i], nxt, verdicts[nxt])
        i += step
    return values[i], None


def sensitivity(stated: Mapping[str, str], sweeps: Mapping[str, Mapping[float, Mapping[str, str]]],
                knobs: Mapping[str, Knob]) -> list[ClaimSensitivity]:
    """`stated`: claim -> verdict at the stated cluster; `sweeps`: knob name ->
    swept value -> claim -> verdict, each sweep moving that knob alone. A claim
    missing at a swept value is skipped there. Claims in `stated`'s order."""
    unknown = set(sweeps) - set(knobs)
    if unknown:
        raise ValueError(f"sensitivity: no Knob for {', '.join(sorted(unknown))}")
    out = []
    for claim, verdict in stated.items():
        ranges = []
        for name, by_value in sweeps.items():
            knob = knobs[name]
            verdicts = {float(v): str(m[claim]) for v, m in by_value.items() if claim in m}
            verdicts[float(knob.stated)] = str(verdict)
            values = sorted(verdicts)
            at = values.index(float(knob.stated))
            low, below = _walk(values, at, -1, verdicts, str(verdict))
            high, above = _walk(values, at, +1, verdicts, str(verdict))
            ranges.append(KnobRange(knob, low, high, below, above, tuple(values)))
        out.append(ClaimSensitivity(claim, str(verdict), ranges))
    return out


def sensitivity_table(rows: list[ClaimSensitivity]) -> str:
    """Markdown: per claim, its verdict at the stated cluster and, per knob, the range it holds over."""
    knobs = [r.knob for r in rows[0].ranges] if rows else []
    head = "| claim | verdict at the stated cluster | " + " | ".join(
        f"{k.name} (stated {k.fmt(k.stated)})" for k in knobs) + " |"
    lines = [head, "|---|---|" + "---|" * len(knobs)]
    for row in rows:
        lines.append(f"| {row.claim} | {row.verdict} | " + " | ".join(r.text() for r in row.ranges) + " |")
    return "\n".join(lines)


# Verdict -> position on a red-to-green scale (unknown words: grey).
_SCALE = {"confirmed": 2, "faster": 2, "tied": 2, "inconclusive": 1, "not confirmed": 0, "slower": 0}


def plot_sensitivity(stated: Mapping[str, str], sweeps: Mapping[str, Mapping[float, Mapping[str, str]]],
                     knobs: Mapping[str, Knob], out: Path, title: str = "") -> Path:
    """The verdict map: one panel per knob, claims by swept value, the stated value outlined."""
    import math

    from psgd.bench.pyplot import pyplot
    plt = pyplot()
    claims = list(stated)
    names = list(sweeps)
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names) + 3, 0.45 * len(claims) + 1.6),
                             squeeze=False)
    for ax, name in zip(axes[0], names):
        knob = knobs[name]
        values = sorted({float(v) for v in sweeps[name]} | {float(knob.stated)})
        cells = [[str(stated[c]) if v == knob.stated else str(sweeps[name].get(v, {}).get(c, "—")) for v in values]
                 for c in claims]
        ax.imshow([[_SCALE.get(x, math.nan) for x in row] for row in cells], cmap="RdYlGn", vmin=0, vmax=2,
                  aspect="auto")
        for i, row in enumerate(cells):
            for j, x in enumerate(row):
                ax.text(j, i, x, ha="center", va="center", fontsize=6)
        at = values.index(float(knob.stated))
        ax.add_patch(plt.Rectangle((at - 0.5, -0.5), 1, len(claims), fill=False, linewidth=2))
        ax.set_xticks(range(len(values)))
        ax.set_xticklabels([f"{v:g}" for v in values], fontsize=7)
        ax.set_xlabel(f"{knob.name} ({knob.unit})" if knob.unit else knob.name, fontsize=8)
        ax.set_yticks(range(len(claims)))
        ax.set_yticklabels(claims if ax is axes[0][0] else [""] * len(claims), fontsize=7)
    fig.suptitle(title or "Verdicts around the stated cluster (outlined: stated value)", fontsize=9)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
