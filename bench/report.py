"""The table `python -m bench.run` prints first: one row a figure, ours (stored and `store: false`) beside
llama-server, the ratio, the target and whether it is met. Pure formatting: no I/O, unit-tested."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

PEER = "llama-server"


@dataclass(frozen=True)
class Target:
    """A bound every one of our values must meet: a fixed number, or (value None) llama-server's own figure
    times `factor`."""

    op: Literal[">=", "<="]
    value: float | None = None
    factor: float = 1.0

    def bound(self, peer: float | None) -> float | None:
        if self.value is not None:
            return self.value
        return None if peer is None else peer * self.factor

    def met(self, ours: float, peer: float | None) -> bool | None:
        bound = self.bound(peer)
        if bound is None:
            return None  # measured against llama-server, which was left out
        return ours >= bound if self.op == ">=" else ours <= bound

    def describe(self) -> str:
        sign = "≥" if self.op == ">=" else "≤"
        if self.value is not None:
            return f"{sign} {format_value(self.value)}"
        return f"{sign} {PEER}" if self.factor == 1.0 else f"{sign} {self.factor:g}x {PEER}"


@dataclass(frozen=True)
class Figure:
    """One row. `stored`: ours with `store` omitted (the default path); `unstored`: ours with `store: false`;
    `peer`: llama-server's. Any of them may be missing (not measured in this run, or no such path)."""

    name: str
    unit: str
    stored: float | None = None
    unstored: float | None = None
    peer: float | None = None
    target: Target | None = None
    #: False where ours ÷ llama-server means nothing (differences such as time over raw llama.cpp).
    ratio_to_peer: bool = True
    #: What limits the figure when it misses its target; printed under the table.
    note: str = ""

    @property
    def ours(self) -> list[float]:
        return [value for value in (self.stored, self.unstored) if value is not None]

    def ratios(self) -> list[float]:
        """Ours ÷ llama-server, stored first; empty without llama-server's figure."""
        if not self.ratio_to_peer or not self.peer:
            return []
        return [value / self.peer for value in self.ours]

    def met(self) -> bool | None:
        """True when every one of our values meets the target; None when it cannot be told."""
        if self.target is None or not self.ours:
            return None
        verdicts = [self.target.met(value, self.peer) for value in self.ours]
        if any(verdict is None for verdict in verdicts):
            return None
        return all(verdicts)


@dataclass
class Report:
    figures: list[Figure] = field(default_factory=list)
    #: Lines saying which figures were left out and how to get them (no binary, no service, no module yet).
    left_out: list[str] = field(default_factory=list)
    #: With --profile: where each process spent its samples while streaming (frame, share), top first.
    profiles: dict[str, list[tuple[str, float]]] = field(default_factory=dict)

    def add(self, figure: Figure) -> None:
        self.figures.append(figure)


def format_value(value: float | None) -> str:
    if value is None:
        return "—"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def verdict(met: bool | None) -> str:
    return {True: "yes", False: "NO", None: "—"}[met]


HEADER = ("figure", "ours stored", "ours store:false", PEER, f"ours ÷ {PEER}", "target", "met?")


def rows(figures: Iterable[Figure]) -> list[tuple[str, ...]]:
    table = []
    for figure in figures:
        name = f"{figure.name} ({figure.unit})" if figure.unit else figure.name
        ratios = " / ".join(format_value(ratio) for ratio in figure.ratios()) or "—"
        target = figure.target.describe() if figure.target else "reported"
        values = (figure.stored, figure.unstored, figure.peer)
        table.append((name, *(format_value(value) for value in values), ratios, target, verdict(figure.met())))
    return table


def format_table(report: Report) -> str:
    """Aligned columns, then a note for each figure that misses its target, then what was left out."""
    table = [HEADER, *rows(report.figures)]
    widths = [max(len(row[column]) for row in table) for column in range(len(HEADER))]
    lines = []
    for index, row in enumerate(table):
        # Text columns left-aligned, numbers right-aligned.
        cells = [
            cell.ljust(width) if column in (0, 5, 6) else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append(" | ".join(cells).rstrip())
        if index == 0:
            lines.append("-+-".join("-" * width for width in widths))
    misses = [figure for figure in report.figures if figure.met() is False]
    if misses:
        lines.append("")
        lines.append("Targets missed, and what limits them:")
        lines += [f"- {figure.name}: {figure.note or 'no note yet'}" for figure in misses]
    if report.profiles:
        lines.append("")
        lines.append("Where the time goes while streaming (py-spy, own samples):")
        for label, frames in report.profiles.items():
            lines.append(f"- {label}: " + "; ".join(f"{frame} {share:.0%}" for frame, share in frames))
    if report.left_out:
        lines.append("")
        lines.append("Left out of this run:")
        lines += [f"- {line}" for line in report.left_out]
    return "\n".join(lines)
