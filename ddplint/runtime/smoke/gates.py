"""The gates of a smoke run: six checks computed from what the ranks recorded (no torch).

Each check has a verdict (pass / fail / skip), a value with its unit, a one-line message,
the rules whose static findings it confirms (on fail) or clears (on pass), the evidence
sentence used for that join, and the places in the user's code where it observed something.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field

from ddplint.runtime.growth import linear_growth, linear_fit
from ddplint.runtime.smoke.telemetry import RankRun

PASS, FAIL, SKIP = "pass", "fail", "skip"
MEMORY_WINDOW = 8  # the last k steps that must all grow (the seed's criterion)


@dataclass
class Check:
    name: str
    verdict: str
    value: float | None
    unit: str
    message: str
    rules: tuple[str, ...] = ()
    evidence: str = ""  # "4 all-reduce rounds per optimizer step in this run"
    locations: list[dict] = field(default_factory=list)  # {"path", "line", "message"}


@dataclass
class RunFacts:
    """What the parent knows besides the event files."""

    max_comm_fraction: float
    timeout_s: float
    stalled_s: float | None = None  # the parent killed a run that made no progress this long


def evaluate(ranks: list[RankRun], facts: RunFacts) -> list[Check]:
    hung = hang(ranks, facts)
    return [memory_growth(ranks), allreduce_per_step(ranks), comm_fraction(ranks, facts.max_comm_fraction),
            data_steps(ranks), hung, exception(ranks, hung=hung.verdict == FAIL)]


# ------------------------------------------------------------------ memory-growth


def memory_growth(ranks: list[RankRun]) -> Check:
    rules = ("DDP001",)
    kind = next((r.init.get("memory_kind") for r in ranks if r.init), "saved-tensors")
    what = "CUDA allocated memory" if kind == "cuda-allocated" else "autograd saved-tensor memory"
    # Step 1 builds buckets, optimizer state and caches: growth is judged after it.
    series = {r.rank: [v for v in r.series("mem")[1:] if v is not None] for r in ranks}
    longest = max((len(s) for s in series.values()), default=0)
    window = min(MEMORY_WINDOW, longest)
    if window < 3:
        steps = max((len(r.steps) for r in ranks), default=0)
        return Check("memory-growth", SKIP, None, "bytes/step",
                     f"{steps} optimizer steps recorded; at least 4 are needed to call growth linear", rules)
    growing = {rank: found for rank, s in series.items()
               if len(s) >= 3 and (found := linear_growth(s, min(window, len(s)))) is not None}
    if growing:
        rank, (slope, r2) = max(growing.items(), key=lambda item: item[1][0])
        tail = series[rank][-window:]
        message = (f"rank {rank}: {what} rose on every one of the last {window} steps, linearly "
                   f"(R²={r2:.3f}): +{fmt_bytes(slope)}/step, {fmt_bytes(tail[0])} → {fmt_bytes(tail[-1])}"
                   + (f"; also ranks {sorted(set(growing) - {rank})}" if len(growing) > 1 else ""))
        return Check("memory-growth", FAIL, slope, "bytes/step", message, rules,
                     f"memory grew +{fmt_bytes(slope)} per step, on every one of the last {window} steps")
    slopes = [linear_fit(s[-window:])[0] for s in series.values() if len(s) >= 2]
    spans = "; ".join(f"rank {rank}: {fmt_bytes(min(s[-window:]))}–{fmt_bytes(max(s[-window:]))}"
                      for rank, s in series.items() if s)
    steps = max(len(r.steps) for r in ranks)
    return Check("memory-growth", PASS, max(slopes, default=0.0), "bytes/step",
                 f"{what} did not grow step over step over the last {window} steps ({spans})", rules,
                 f"memory flat over {steps} steps")


# ------------------------------------------------------------------ allreduce-per-step


def allreduce_per_step(ranks: list[RankRun]) -> Check:
    rules = ("DDP002", "DDP013")
    per_rank = {r.rank: [s["rounds"] for s in r.steps if s.get("rounds")] for r in ranks}
    if not any(per_rank.values()):
        return Check("allreduce-per-step", SKIP, None, "rounds/step",
                     "no DDP gradient all-reduce was seen (no DDP model, or no step finished)", rules)
    medians = {rank: statistics.median(v) for rank, v in per_rank.items() if v}
    rank, worst = max(medians.items(), key=lambda item: item[1])
    run = next(r for r in ranks if r.rank == rank)
    synced = [s for s in run.steps if s.get("rounds")]
    buckets = statistics.median(s["buckets"] for s in synced)
    nbytes = statistics.median(s["bucket_bytes"] for s in synced)
    detail = ", ".join(f"rank {r}: {_num(m)}" for r, m in sorted(medians.items()))
    volume = f"{_num(buckets)} bucket all-reduces, {fmt_bytes(nbytes)} per step"
    if worst > 1:
        return Check("allreduce-per-step", FAIL, worst, "rounds/step",
                     f"{_num(worst)} gradient all-reduce rounds per optimizer step ({detail}; {volume}): "
                     "every micro-batch's backward is synchronised; accumulate under model.no_sync()",
                     rules, f"{_num(worst)} all-reduce rounds per optimizer step in this run")
    return Check("allreduce-per-step", PASS, worst, "rounds/step",
                 f"one gradient all-reduce round per optimizer step ({volume})", rules,
                 f"1 all-reduce round per optimizer step over {len(synced)} steps")


# ------------------------------------------------------------------ comm-fraction


def comm_fraction(ranks: list[RankRun], limit: float) -> Check:
    fractions = {}
    for r in ranks:
        steps = [s for s in (r.steps[1:] or r.steps) if s["wall_s"] > 0]  # step 1 is warm-up
        if steps:
            # The median step: one step that a busy machine stretched does not decide.
            fractions[r.rank] = statistics.median(s["comm_s"] / s["wall_s"] for s in steps)
    if not fractions:
        return Check("comm-fraction", SKIP, None, "fraction", "no optimizer step was timed")
    # A fast rank also waits in the all-reduce for a slow one; the rank that waited least
    # shows what communication itself costs.
    value = min(fractions.values())
    detail = ", ".join(f"rank {r}: {f:.0%}" for r, f in sorted(fractions.items()))
    verdict = FAIL if value > limit else PASS
    relation = "above" if verdict == FAIL else "within"
    return Check("comm-fraction", verdict, round(value, 4), "fraction",
                 f"communication takes {value:.0%} of the median step ({detail}; the rank that waited least "
                 f"for its peers counts), {relation} --max-comm-fraction {limit:g}")


# ------------------------------------------------------------------ data-steps


def data_steps(ranks: list[RankRun]) -> Check:
    labels = sorted({label for r in ranks for label in r.loaders})
    if not labels:
        return Check("data-steps", SKIP, None, "batches", "the script iterated no torch DataLoader")
    for label in labels:
        lengths = {r.rank: r.loaders[label]["length"] for r in ranks if label in r.loaders}
        known = {k: v for k, v in lengths.items() if v is not None}
        if len(set(known.values())) > 1:
            most = max(known, key=known.get)
            spread = ", ".join(f"rank {k}: {v}" for k, v in sorted(known.items()))
            site = next(r.loaders[label]["site"] for r in ranks if label in r.loaders)
            return Check("data-steps", FAIL, max(known.values()) - min(known.values()), "batches",
                         f"the loader at {label} has a different length per rank ({spread}): at the end of "
                         f"each epoch rank {most} runs steps the others do not and waits in their collectives",
                         (), "", _location(site, f"len(loader) differs across ranks ({spread})"))
    consumed = _batches_consumed(ranks)
    if consumed is not None and len(set(consumed.values())) > 1:
        spread = ", ".join(f"rank {k}: {v}" for k, v in sorted(consumed.items()))
        steps = min(len(r.steps) for r in ranks)
        return Check("data-steps", FAIL, max(consumed.values()) - min(consumed.values()), "batches",
                     f"ranks consumed different numbers of batches for the same {steps} optimizer steps "
                     f"({spread}): their steps no longer pair the same data")
    lengths = ", ".join(f"{label}: {_length(ranks, label)}" for label in labels)
    return Check("data-steps", PASS, 0, "batches",
                 f"every rank has the same loader lengths ({lengths}) and consumed the same batches")


def _batches_consumed(ranks: list[RankRun]) -> dict | None:
    """Batches per rank over the recorded steps, when the ranks ended alike (all stopped at
    --steps, or all finished the script); None when a failure cut some rank short."""
    outcomes = {r.outcome for r in ranks}
    if not (outcomes == {"stopped"} or outcomes == {"finished"}) or len({len(r.steps) for r in ranks}) > 1:
        return None
    return {r.rank: sum(sum(s["batches"].values()) for s in r.steps) for r in ranks}


def _length(ranks: list[RankRun], label: str):
    return next((r.loaders[label]["length"] for r in ranks if label in r.loaders), None)


# ------------------------------------------------------------------ hang


def hang(ranks: list[RankRun], facts: RunFacts) -> Check:
    rules = ("DDP010", "DDP014")
    steps = min((len(r.steps) for r in ranks), default=0)
    raised = [r for r in ranks if r.error is not None and r.error.get("failure") is None]
    waits = _waits(ranks)
    if raised:
        # Peers left waiting for a rank that raised are the exception's doing, not a hang.
        first = min(raised, key=lambda r: r.error["t"])
        stuck = f"; ranks {[w.run.rank for w in waits]} were left in collectives it never reached" if waits else ""
        return Check("hang", PASS, None, "s",
                     f"no hang: rank {first.rank}'s exception ended the run (see exception){stuck}")
    if waits:
        return _diagnose(waits[0], ranks, rules)
    if facts.stalled_s is not None:
        return _stalled(ranks, facts, rules)
    failed = [r for r in ranks if r.error is not None]
    if failed:  # a backend error outside any collective we saw
        r = failed[0]
        return Check("hang", FAIL, None, "s", f"rank {r.rank}: {r.error['type']}: {r.error['message']}", rules,
                     f"rank {r.rank}'s communication failed ({r.error['failure']})")
    total = max((sum(r.issued(g) for g in {c['group'] for c in r.collectives}) for r in ranks), default=0)
    return Check("hang", PASS, None, "s",
                 f"every rank joined every collective ({total} collectives over {steps} steps; "
                 f"timeout {facts.timeout_s:g} s)", rules,
                 f"every rank reached each collective over {steps} steps")


@dataclass
class _Wait:
    run: RankRun
    entry: dict  # the collective it waited in (seq, group, op, site, step)
    waited_s: float
    outcome: str  # how the wait ended


_OUTCOMES = {"timeout": "timed out", "peer-lost": "failed when a peer left", "backend": "failed"}


def _waits(ranks: list[RankRun]) -> list[_Wait]:
    """Ranks that were waiting in a collective when the run ended, first by rank.

    A rank whose collective failed while in flight says so in its error event.  Otherwise
    (NCCL's futures complete when the work is queued; NCCL's watchdog aborts the process;
    torchrun or ddplint sends SIGTERM) the rank's last logged collective counts when some
    peer never issued it."""
    found = []
    for r in ranks:
        failure = (r.error or {}).get("failure")
        if failure and r.error.get("in_flight"):
            entry = min(r.error["in_flight"], key=lambda e: e["seq"])
            found.append(_Wait(r, entry, entry["waited_s"], _OUTCOMES[failure]))
        elif (failure or r.outcome == "killed") and r.collectives:
            entry = r.collectives[-1]
            if any(_differs(peer.collective(entry["group"], entry["seq"]), entry) for peer in ranks if peer is not r):
                end = r.error["t"] if failure else (r.ended_t or r.last_t)
                outcome = _OUTCOMES[failure] if failure else "was killed while waiting"
                found.append(_Wait(r, entry, max(0.0, end - entry["t"]), outcome))
    return sorted(found, key=lambda w: w.run.rank)


def _differs(theirs: dict | None, entry: dict) -> bool:
    return theirs is None or theirs["op"] != entry["op"] or theirs["site"] != entry["site"]


def _diagnose(wait: _Wait, ranks: list[RankRun], rules) -> Check:
    w, entry = wait.run, wait.entry
    group, seq = entry["group"], entry["seq"]
    where = _site_text(entry["site"])
    head = (f"rank {w.rank} waited {wait.waited_s:.1f} s in collective #{seq} {entry['op']}"
            f"{' (' + where + ', step ' + str(entry['step']) + ')' if where else ''} and {wait.outcome}")
    absent, notes, locations = [], [], _location(entry["site"], f"rank {w.rank} waited here in collective "
                                                                 f"#{seq} {entry['op']}")
    for peer in ranks:
        theirs = peer.collective(group, seq)
        if peer is w or not _differs(theirs, entry):
            continue
        absent.append(peer.rank)
        if theirs is None:
            notes.append(f"rank {peer.rank} never arrived: {_state(peer, group)}")
        else:
            notes.append(f"rank {peer.rank} issued {theirs['op']} at {_site_text(theirs['site'])} "
                         f"as collective #{seq} instead")
            locations += _location(theirs["site"], f"rank {peer.rank} issued {theirs['op']} here as #{seq}")
    if not notes:
        notes.append("every rank entered it (a backend or network failure, not a missing rank)")
    fr = (w.error or {}).get("flight_recorder") or []
    if fr:
        last = fr[-1]
        notes.append(f"flight recorder: last entry {last['name']}, its seq {last['seq']}, {last['state']}")
    who = f"rank {absent[0]}" if len(absent) == 1 else f"ranks {absent}"
    evidence = (f"rank {w.rank} waited in collective #{seq} ({entry['op']}) that {who} never joined"
                if absent else f"collective #{seq} failed on rank {w.rank}")
    return Check("hang", FAIL, round(wait.waited_s, 3), "s", head + "; " + "; ".join(notes), rules,
                 evidence, locations)


def _state(peer: RankRun, group: str) -> str:
    issued = peer.issued(group)
    if peer.error is not None and peer.error.get("in_flight"):
        e = min(peer.error["in_flight"], key=lambda x: x["seq"])
        return f"it was waiting in collective #{e['seq']} {e['op']} at {_site_text(e['site'])}"
    if peer.error is not None:
        return f"it raised {peer.error['type']} after {issued} collectives"
    if peer.outcome == "finished":
        return f"it finished the script after {issued} collectives and {len(peer.steps)} steps"
    if peer.outcome == "stopped":
        return f"it had stopped at the --steps limit after {issued} collectives"
    last = peer.collectives[-1] if peer.collectives else None
    where = f"; its last collective was #{last['seq']} {last['op']} at {_site_text(last['site'])}" if last else ""
    return f"it was killed after {issued} collectives{where}"


def _stalled(ranks: list[RankRun], facts: RunFacts, rules) -> Check:
    parts = []
    for r in ranks:
        last = r.collectives[-1] if r.collectives else None
        parts.append(f"rank {r.rank}: {len(r.steps)} steps, last collective "
                     + (f"#{last['seq']} {last['op']} at {_site_text(last['site'])}" if last else "none"))
    return Check("hang", FAIL, facts.stalled_s, "s",
                 f"no rank made progress for {facts.stalled_s:.0f} s and ddplint stopped the run "
                 f"(not inside a collective it could time out): {'; '.join(parts)}", rules)


# ------------------------------------------------------------------ exception


def exception(ranks: list[RankRun], hung: bool = False) -> Check:
    raised = sorted((r for r in ranks if r.error is not None and r.error.get("failure") is None),
                    key=lambda r: r.error["t"])
    if not raised:
        killed = [r for r in ranks if r.outcome == "killed"]
        failed = [r for r in ranks if r.error is not None]
        # A rank killed while it hung (NCCL's watchdog aborts it) is the hang's story.
        if killed and not failed and not hung and not all(r.outcome == "killed" for r in ranks):
            r = killed[0]
            return Check("exception", FAIL, None, "s",
                         f"rank {r.rank} died without a Python exception after {len(r.steps)} steps "
                         "(a signal, the OOM killer, or os._exit)")
        return Check("exception", PASS, None, "s", "no rank raised an error of its own")
    first = raised[0]
    t0 = first.error["t"]
    others = [r for r in ranks if r is not first and (r.ended_t or r.last_t)]  # silent ranks: no times
    stopped_after = max(0.0, *((r.ended_t or r.last_t) - t0 for r in others)) if others else None
    where = _site_text(first.error.get("site"))
    also = f"; ranks {[r.rank for r in raised[1:]]} raised too" if len(raised) > 1 else ""
    message = (f"rank {first.rank} raised {first.error['type']}: {first.error['message']}"
               f"{' at ' + where if where else ''} (step {first.error.get('steps', 0) + 1})"
               + (f"; the other ranks stopped {stopped_after:.1f} s later" if others else "") + also)
    return Check("exception", FAIL, None if stopped_after is None else round(stopped_after, 3), "s", message, (), "",
                 _location(first.error.get("site"), f"rank {first.rank} raised {first.error['type']} here"))


# ------------------------------------------------------------------ helpers


def _location(site, message: str) -> list[dict]:
    return [{"path": site[0], "line": site[1], "message": message}] if site else []


def _site_text(site) -> str:
    if not site:
        return ""
    return f"{os.path.basename(site[0])}:{site[1]}"


def _num(value: float) -> str:
    return f"{value:g}"


def fmt_bytes(value: float) -> str:
    sign = "-" if value < 0 else ""
    value = abs(value)
    for scale, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if value >= scale:
            return f"{sign}{value / scale:.3g} {name}"
    return f"{sign}{value:.0f} B"
