"""The timeline PNG `psgd explain` writes (the `bench` extra): workers as rows, each step's
own compute, its round trip (push, the reply) and, over it, the wait of a parked pull as colours, drawn
from the spans of the run's trace (psgd.bench.trace), in the run's own clock, over the
time every worker took for its first STEPS_SHOWN steps (the whole run is in the trace)."""
from __future__ import annotations

from pathlib import Path

from psgd.bench.pyplot import pyplot
from psgd.bench.trace import WAIT, WORKERS_PID

__all__ = ["plot_timeline", "TIMELINE_PLOT", "COLOURS"]

TIMELINE_PLOT = "timeline.png"
STEPS_SHOWN = 40  # the steps a row shows: enough to see the pattern, few enough to see each step
COLOURS = {"compute": "tab:blue", "push+pull": "tab:orange", WAIT: "tab:red"}  # WAIT: the spans of that category
_LABELS = {"compute": "compute", "push+pull": "round trip (push, reply)", WAIT: "parked at a barrier or bound"}


def plot_timeline(trace: dict, out: Path, title: str) -> Path:
    plt = pyplot()
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("pid") == WORKERS_PID]
    ranks = sorted({e["tid"] for e in spans})
    ends = [sorted(e["ts"] + e["dur"] for e in spans if e["tid"] == r and e["name"] == "push+pull") for r in ranks]
    until = max(row[min(len(row), STEPS_SHOWN) - 1] for row in ends if row)  # every row's first STEPS_SHOWN steps
    spans = [e for e in spans if e["ts"] < until]
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(ranks) + 2))
    for name, colour in COLOURS.items():
        for row, rank in enumerate(ranks):
            bars = [(e["ts"] / 1e6, e["dur"] / 1e6) for e in spans
                    if e["tid"] == rank and (e.get("cat") == name if name == WAIT else e["name"] == name)]
            ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=colour, label=_LABELS[name] if row == 0 else None)
    ax.set_yticks(range(len(ranks)), [f"worker {r}" for r in ranks])
    ax.set_xlabel(f"{'simulated' if trace['otherData']['clock'] == 'simulated' else 'wall'} time (s)")
    ax.set_title(f"{title}: the first {STEPS_SHOWN} steps of each worker", fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=3, fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
