"""Precision and recall of ddplint on the blind-labelled files, in both modes users run.

    python benchmarks/accuracy/measure.py                  # the ddplint of this Python
    python benchmarks/accuracy/measure.py --python /venv-of-old-version/bin/python --label before
    python benchmarks/accuracy/measure.py --save-diagnostics /tmp/d.json        # lint once, all sets
    python benchmarks/accuracy/measure.py --diagnostics /tmp/d.json --set holdout   # score a subset again

For every repository in labels/*.yaml, the script lays the snapshot out from the
fetched mirror (``/work/.mirror/owner+name``, see the search tool's ``fetch``) at
the labelled commit into a scratch folder (``git init`` there, its Python files
staged: a real checkout has ``.git`` at its root and tracks its files), then runs
ddplint twice:

- **root**: ``ddplint .`` at the repository root (CI, ``ddplint path/``);
- **named**: ``ddplint FILE...`` with only the labelled files (pre-commit passes
  the staged files).

A diagnostic matches a label of the same rule and file within 3 lines (one to
one). Recall counts ``sure`` labels; precision counts a diagnostic right when it
matches any label, or, in the adjudicated figures, when ``adjudicated.yaml``
records a reviewer's verdict "right" for it (a second reading of disagreements,
which the independent review also did). Never commit fetched code: the scratch
folder lives under /tmp. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mirrors import lay_out_snapshot  # noqa: E402

HERE = Path(__file__).resolve().parent
TOLERANCE = 3
RULES = [f"DDP{n:03d}" for n in range(1, 26)]


@dataclass
class Label:
    repo: str
    path: str
    rule: str
    line: int
    certainty: str
    why: str = ""


@dataclass
class Repo:
    name: str
    commit: str
    files: list[str] = field(default_factory=list)


def load_labels(folder: Path) -> tuple[dict[str, Repo], list[Label]]:
    repos: dict[str, Repo] = {}
    labels: list[Label] = []
    for file in sorted(folder.glob("*.yaml")):
        document = yaml.safe_load(file.read_text()) or {}
        for entry in document.get("repos") or []:
            repo = repos.setdefault(entry["repo"], Repo(entry["repo"], entry["commit"]))
            if repo.commit != entry["commit"]:
                raise SystemExit(f"{file.name}: {entry['repo']} labelled at two commits")
            for labelled in entry.get("files") or []:
                if labelled["path"] not in repo.files:  # two labellers may take the same file
                    repo.files.append(labelled["path"])
                for label in labelled.get("labels") or []:
                    labels.append(Label(entry["repo"], labelled["path"], label["rule"], int(label["line"]),
                                        label.get("certainty", "sure"), label.get("why", "")))
    # The same finding labelled by both counts once (the surest certainty).
    unique: dict[tuple, Label] = {}
    for label in sorted(labels, key=lambda l: l.certainty != "sure"):
        unique.setdefault((label.repo, label.path, label.rule, label.line), label)
    return repos, list(unique.values())


def held_out(repo: str) -> bool:
    """About a third of the repositories, chosen by a hash of the name, are held
    out: rules are tuned on the others (``--set dev``) and the held-out figures
    (``--set holdout``) measure code nobody tuned on."""
    import hashlib

    return hashlib.sha1(repo.encode()).digest()[0] % 3 == 0


def load_adjudications(path: Path) -> dict[tuple[str, str, str, int], str]:
    if not path.exists():
        return {}
    entries = yaml.safe_load(path.read_text()) or []
    return {(e["repo"], e["path"], e["rule"], int(e["line"])): e["verdict"] for e in entries}


def lay_out(repo: Repo, scratch: Path) -> Path:
    return lay_out_snapshot(repo.name, repo.commit, scratch / repo.name.replace("/", "+"))


def run_ddplint(command: list[str], root: Path, paths: list[str], env: dict) -> dict[str, list[tuple[str, int]]]:
    done = subprocess.run([*command, "--format", "json", "--no-cache", "--exit-zero", *paths],
                          cwd=root, capture_output=True, text=True, env=env)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"ddplint failed in {root}: {done.stderr.strip()[-500:]}")
    document = json.loads(done.stdout)
    found: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for entry in document["files"]:
        for diagnostic in entry["diagnostics"]:
            code = diagnostic["code"]
            if code in RULES:
                found[entry["path"]].append((code, diagnostic["range"]["start"]["line"] + 1))
    return found


@dataclass
class Tally:
    true_positive: int = 0  # diagnostics matching a label
    adjudicated_right: int = 0  # unmatched diagnostics a reviewer judged right
    false_positive: int = 0
    found_sure: int = 0
    missed_sure: int = 0

    def precision(self, adjudicated: bool) -> float | None:
        right = self.true_positive + (self.adjudicated_right if adjudicated else 0)
        total = self.true_positive + self.adjudicated_right + self.false_positive
        return right / total if total else None

    def recall(self) -> float | None:
        total = self.found_sure + self.missed_sure
        return self.found_sure / total if total else None


def score(repos, labels, diagnostics, adjudications, details):
    """One mode's tallies per rule; ``details`` collects every disagreement."""
    tallies: dict[str, Tally] = defaultdict(Tally)
    by_file: dict[tuple[str, str], list[Label]] = defaultdict(list)
    for label in labels:
        by_file[(label.repo, label.path)].append(label)
    for repo in repos.values():
        for path in repo.files:
            expected = list(by_file.get((repo.name, path), []))
            matched: set[int] = set()
            for rule, line in sorted(diagnostics.get((repo.name, path), [])):
                candidates = [(abs(l.line - line), i) for i, l in enumerate(expected)
                              if i not in matched and l.rule == rule and abs(l.line - line) <= TOLERANCE]
                if candidates:
                    matched.add(min(candidates)[1])
                    tallies[rule].true_positive += 1
                    continue
                verdict = adjudications.get((repo.name, path, rule, line))
                if verdict == "right":
                    tallies[rule].adjudicated_right += 1
                else:
                    tallies[rule].false_positive += 1
                details.append(f"{'FP' if verdict != 'right' else 'ok'} {rule} {repo.name}:{path}:{line}"
                               f"{'' if verdict else ' (not adjudicated)'}")
            for i, label in enumerate(expected):
                if label.certainty != "sure":
                    continue
                if i in matched:
                    tallies[label.rule].found_sure += 1
                else:
                    tallies[label.rule].missed_sure += 1
                    details.append(f"FN {label.rule} {repo.name}:{path}:{label.line}  ({label.why})")
    return tallies


def table(modes: dict[str, dict[str, Tally]]) -> str:
    def fmt(value):
        return "–" if value is None else f"{value:.2f}"

    names = list(modes)
    header = "| rule | " + " | ".join(f"{m}: P (adj.) | {m}: R | {m}: TP/FP/FN" for m in names) + " |"
    lines = [header, "|" + "---|" * (1 + 3 * len(names))]
    for rule in [*RULES, "all"]:
        cells = []
        for mode in names:
            tallies = modes[mode]
            tally = _total(tallies) if rule == "all" else tallies.get(rule, Tally())
            cells += [f"{fmt(tally.precision(False))} ({fmt(tally.precision(True))})", fmt(tally.recall()),
                      f"{tally.true_positive + tally.adjudicated_right}/{tally.false_positive}/{tally.missed_sure}"]
        if rule != "all" and all(c in ("– (–)", "–", "0/0/0") for c in cells):
            continue
        lines.append(f"| {rule} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _total(tallies: dict[str, Tally]) -> Tally:
    total = Tally()
    for tally in tallies.values():
        for name in vars(total):
            setattr(total, name, getattr(total, name) + getattr(tally, name))
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter whose installed ddplint is measured (default: this one)")
    parser.add_argument("--label", default="this checkout")
    parser.add_argument("--set", choices=("all", "dev", "holdout"), default="all",
                        help="dev: the repositories rules may be tuned on; holdout: the others")
    parser.add_argument("--scratch", default=os.path.join(tempfile.gettempdir(), "ddplint-accuracy"))
    parser.add_argument("--details", help="write every disagreement to this file")
    parser.add_argument("--json", help="write the tallies as JSON to this file")
    parser.add_argument("--labels", default=str(HERE / "labels"), help="the folder of label files (default: labels/)")
    parser.add_argument("--save-diagnostics", help="write what ddplint reported (both modes) to this JSON file")
    parser.add_argument("--diagnostics", help="score the diagnostics saved by --save-diagnostics instead of "
                                              "running ddplint (to score --set dev and holdout from one run); "
                                              "comma-separated files are joined")
    args = parser.parse_args()

    repos, labels = load_labels(Path(args.labels))
    if args.set != "all":
        keep = {name for name in repos if held_out(name) == (args.set == "holdout")}
        repos = {name: repo for name, repo in repos.items() if name in keep}
        labels = [label for label in labels if label.repo in keep]
    adjudications = load_adjudications(HERE / "adjudicated.yaml")
    environment = dict(os.environ)
    command = [args.python, "-m", "ddplint"]
    scratch = Path(args.scratch)
    root_found: dict[tuple[str, str], list] = {}
    named_found: dict[tuple[str, str], list] = {}
    skipped = []
    if args.diagnostics:
        for saved_file in args.diagnostics.split(","):  # several files: runs over disjoint label sets
            saved = json.loads(Path(saved_file).read_text())
            root_found.update({tuple(k.split("\t")): [tuple(d) for d in v] for k, v in saved["root"].items()})
            named_found.update({tuple(k.split("\t")): [tuple(d) for d in v] for k, v in saved["named"].items()})
    for repo in ([] if args.diagnostics else repos.values()):
        try:
            root = lay_out(repo, scratch)
        except (FileNotFoundError, subprocess.CalledProcessError) as error:
            skipped.append(f"{repo.name}: {error}")
            continue
        for path, found in run_ddplint(command, root, ["."], environment).items():
            root_found[(repo.name, path)] = found
        present = [p for p in repo.files if (root / p).exists()]
        for path, found in run_ddplint(command, root, present, environment).items():
            named_found[(repo.name, path)] = found
    if args.save_diagnostics:
        Path(args.save_diagnostics).write_text(json.dumps({
            "root": {"\t".join(k): v for k, v in root_found.items()},
            "named": {"\t".join(k): v for k, v in named_found.items()}}))
    details: list[str] = []
    modes = {"root": score(repos, labels, root_found, adjudications, details)}
    details.append("---- named files")
    modes["named"] = score(repos, labels, named_found, adjudications, details)
    files = sum(len(r.files) for r in repos.values())
    sure = sum(1 for label in labels if label.certainty == "sure")
    print(f"ddplint: {args.label} ({args.python}); set {args.set}: {len(repos)} repositories, {files} files, "
          f"{len(labels)} labels ({sure} sure)")
    for line in skipped:
        print("skipped:", line)
    print(table(modes))
    if args.details:
        Path(args.details).write_text("\n".join(details) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({m: {r: vars(t) for r, t in ts.items()} for m, ts in modes.items()},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
