"""Read the ranks' event files back into one ``RankRun`` per rank (parent side, no torch)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class RankRun:
    rank: int | None
    pid: int
    init: dict = field(default_factory=dict)
    steps: list[dict] = field(default_factory=list)
    collectives: list[dict] = field(default_factory=list)
    loaders: dict[str, dict] = field(default_factory=dict)  # label -> last loader event
    flops: dict | None = None
    error: dict | None = None
    stop: dict | None = None
    exit: dict | None = None
    last_t: float = 0.0  # time of the last event (progress)
    ended_t: float | None = None  # when the parent saw the process gone

    @property
    def is_rank(self) -> bool:
        return bool(self.init)

    @property
    def outcome(self) -> str:
        """stopped (at --steps) | finished (the script ended) | raised (its own error) |
        collective-failed (a collective timed out or lost its peer) | killed (no last word)."""
        if self.stop is not None:
            return "stopped"
        if self.error is not None:
            return "collective-failed" if self.error.get("failure") else "raised"
        if self.exit is not None:
            return "finished"
        return "killed"  # no last word: a signal, an abort, or it never got to write one

    def collective(self, group: str, seq: int) -> dict | None:
        for entry in self.collectives:
            if entry["group"] == group and entry["seq"] == seq:
                return entry
        return None

    def issued(self, group: str) -> int:
        return max((c["seq"] for c in self.collectives if c["group"] == group), default=0)

    def series(self, key: str) -> list:
        return [s.get(key) for s in self.steps]


class EventReader:
    """Reads the event files of a run folder incrementally (the parent polls while the
    run goes on: progress and pids), and hands back the ranks at the end."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.runs: dict[int, RankRun] = {}  # by pid
        self._offsets: dict[Path, int] = {}

    def poll(self) -> None:
        for path in sorted(self.folder.glob("events-*.jsonl")):
            pid = int(path.stem.split("-", 1)[1])
            run = self.runs.setdefault(pid, RankRun(rank=None, pid=pid))
            with open(path, "rb") as f:
                f.seek(self._offsets.get(path, 0))
                data = f.read()
            complete = data[: data.rfind(b"\n") + 1]  # a line being written waits for the next poll
            self._offsets[path] = self._offsets.get(path, 0) + len(complete)
            for line in complete.decode("utf-8", "replace").splitlines():
                try:
                    _apply(run, json.loads(line))
                except (ValueError, KeyError, TypeError):
                    continue  # a torn line from a killed process

    def last_progress(self) -> float:
        return max((r.last_t for r in self.runs.values()), default=0.0)

    def ranks(self) -> list[RankRun]:
        """Processes that initialised a process group, or raised before doing so, by rank."""
        found = [r for r in self.runs.values() if r.is_rank or (r.error is not None and r.rank is not None)]
        return sorted(found, key=lambda r: (r.rank if r.rank is not None else 1 << 30, r.pid))


def _apply(run: RankRun, event: dict) -> None:
    kind = event["ev"]
    run.last_t = max(run.last_t, event["t"])
    if kind == "init":
        run.init, run.rank = event, event["rank"]
    elif kind == "step":
        run.steps.append(event)
    elif kind == "coll":
        run.collectives.append(event)
    elif kind == "loader":
        run.loaders[event["label"]] = event
    elif kind == "flops":
        run.flops = event
    elif kind == "error":
        run.error = event
        if run.rank is None and event.get("rank") is not None:
            run.rank = event["rank"]
    elif kind == "stop":
        run.stop = event
    elif kind == "exit":
        run.exit = event
