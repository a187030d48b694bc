"""## What it does
Flags a suppression comment that silences nothing: `# noqa: DDP005`,
`# ddplint: ignore[DDP005] reason` or a file-wide `# ddplint: noqa: DDP005`
where DDP005 ran on the file and reported nothing there (and, in a list of
codes, each code that silences nothing).

A code is judged only when its rule was selected and actually ran on the file:
a `# noqa: DDP007` in a run that did not select DDP007, in a file DDP007 skips
(outside DDP context, or without its trigger words), or under a per-file ignore
is never reported. A bare `# noqa` (or `# NOQA`) is never judged: flake8, Ruff
and other tools share that comment, and ddplint cannot know what it silences
for them. A bare `# ddplint: ignore` or `# ddplint: noqa` is judged only when
every rule was selected and each either ran or could not fire on the file's
text. `# noqa: DDP100` itself is never judged.

## Why is this bad?
A stale suppression hides the next real finding on its line: code changes, the
original problem is gone, and when a new one appears there nobody is told. Old
suppressions also make a codebase look as if it had exceptions it no longer has.

## Example
    model = DDP(net, find_unused_parameters=False)  # noqa: DDP005

## Use instead
    model = DDP(net, find_unused_parameters=False)

Fix (safe): removes the comment (the whole line when the comment is alone on
it; other comments on the line stay), or the unused codes from its list.
A bare suppression never silences the finding about itself; one that names
DDP100 (`# noqa: DDP005, DDP100`) does.

## References
- https://docs.astral.sh/ruff/rules/unused-noqa/
"""

from __future__ import annotations

from typing import Iterable, Mapping

from ddplint.diagnostics import Diagnostic
from ddplint.source import split_lines
from ddplint.rule import Invalid, Rule, Valid
from ddplint.suppressions import Directive, Suppressions

DDP = "from torch.nn.parallel import DistributedDataParallel as DDP\n"


class UnusedSuppression(Rule):
    code, name, severity = "DDP100", "unused-suppression", "warning"
    message = "unused suppression: it silences nothing here"
    # Judged by the engine after the other rules ran (it needs their findings).
    example_selection = ("DDP005", "DDP016", "DDP007")

    valid = [
        Valid(DDP + "model = DDP(net, find_unused_parameters=True)  # noqa: DDP005\n"),
        Valid(DDP + "model = DDP(net, find_unused_parameters=True)  # ddplint: ignore[DDP005] measured: +2%\n"),
        Valid("# ddplint: noqa: DDP005\n" + DDP + "model = DDP(net, find_unused_parameters=True)\n"),
        # DDP009 was not selected in this run.
        Valid(DDP + "model = DDP(net, find_unused_parameters=True)  # noqa: DDP005, DDP009\n"),
        # DDP007 needs DDP context, which this module lacks: it did not run.
        Valid("import torch\nx = torch.ones(2, device='cuda:0')  # noqa: DDP007\n"),
        # DDP016's trigger word is absent: it did not run.
        Valid("import torch\nmodel = torch.compile(net)  # noqa: DDP016\n"),
        # A bare noqa is judged only when every rule was selected.
        Valid(DDP + "model = DDP(net)  # ddplint: ignore\n"),
        # A bare noqa belongs to every linter of the project (flake8's F401 here): never judged.
        Valid(DDP + "from .version import __version__  # noqa\nmodel = DDP(net)  # NOQA\n"),
        Valid(DDP + "model = DDP(net, find_unused_parameters=False)  # noqa: DDP005, DDP100\n"),
    ]
    invalid = [
        Invalid(DDP + "model = DDP(net, find_unused_parameters=False)  # noqa: DDP005\n", line=2, column=49,
                fixed=DDP + "model = DDP(net, find_unused_parameters=False)\n"),
        # One code of a list: only that code goes.
        Invalid(DDP + "model = DDP(net, find_unused_parameters=True)  # noqa: DDP005, DDP016\n", line=2, column=48,
                fixed=DDP + "model = DDP(net, find_unused_parameters=True)  # noqa: DDP005\n"),
        Invalid(DDP + "model = DDP(net, find_unused_parameters=False)  # ddplint: ignore[DDP005] slow path\n",
                line=2, column=49, fixed=DDP + "model = DDP(net, find_unused_parameters=False)\n"),
        # A file-wide suppression alone on its line: the line goes (CRLF kept elsewhere).
        Invalid("# ddplint: noqa: DDP016\r\n" + DDP.replace("\n", "\r\n") + "model = DDP(net)\r\n", line=1, column=1,
                fixed=DDP.replace("\n", "\r\n") + "model = DDP(net)\r\n"),
        # Other comments on the line stay.
        Invalid(DDP + "model = DDP(net, find_unused_parameters=False)  # keep it simple  # noqa: DDP005\n",
                line=2, column=67, fixed=DDP + "model = DDP(net, find_unused_parameters=False)  # keep it simple\n"),
        Invalid(DDP + "model = DDP(net, find_unused_parameters=False)  # noqa: DDP005  # keep it simple\n",
                line=2, column=49, fixed=DDP + "model = DDP(net, find_unused_parameters=False)  # keep it simple\n"),
        Invalid(DDP + "# noqa: DDP005\nmodel = DDP(net, find_unused_parameters=True)  # noqa: DDP005\n", line=2,
                column=1, fixed=DDP + "model = DDP(net, find_unused_parameters=True)  # noqa: DDP005\n"),
    ]

    def check(self, index):
        return ()  # judged by the engine through ``judge`` once the other rules have run

    def judge(self, source: str, suppressions: Suppressions, used: Mapping[Directive, set[str]],
              judged: frozenset[str], judge_all: bool) -> Iterable[Diagnostic]:
        """Findings for ``suppressions`` of ``source``: ``used`` maps each
        directive to the codes it silenced; ``judged`` are the codes whose
        rules ran on the file; ``judge_all``: a bare suppression can be judged."""
        lines = split_lines(source)
        for directive in suppressions.directives:
            silenced = used.get(directive, set())
            if directive.silences_all:
                if not judge_all or silenced or not directive.text.lower().startswith("# ddplint"):
                    continue
                unused, kept = [], []
            else:
                listed = directive.listed_codes()
                unused = [code for code in listed if code in judged and code != self.code and code not in silenced]
                kept = [code for code in listed if code not in unused]
                if not unused:
                    continue
            line_text = lines[directive.line - 1].rstrip("\r\n") if directive.line <= len(lines) else ""
            if kept:
                edit = directive.with_codes(kept)
                description = f"Remove {', '.join(unused)} from the suppression"
            else:
                edit = directive.removal(line_text, len(lines))
                description = "Remove the unused suppression"
            from ddplint.fixes import SAFE, Fix  # only when a suppression is unused (startup of a clean run)

            where = "in this file" if directive.whole_file else "on this line"
            what = f"{', '.join(unused)} reported nothing {where}" if unused else f"nothing is reported {where}"
            yield Diagnostic(directive.line, directive.column, directive.line, directive.end_column,
                             self.code, self.name, self.severity, f"unused suppression: {what}",
                             Fix(description, SAFE, (edit,)))
