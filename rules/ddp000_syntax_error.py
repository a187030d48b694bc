"""## What it does
Reports a file that cannot be parsed (a syntax error, an undecodable encoding, or
nesting too deep to analyse), at the position the parser stopped.

## Why is this bad?
ddplint cannot check a file it cannot read, and neither can Python run it: the
job would fail at import on every rank, after the cluster allocation was granted.

## Example
    def train(:
        ...

## Use instead
    def train():
        ...

## References
- https://docs.python.org/3/reference/grammar.html

Note: like every rule, this one only sees files that the text prefilter lets
through (a file containing none of the selected rules' trigger words is not
parsed). Select `DDP000` alone to parse every file.
"""

from ddplint.rule import Invalid, Rule, Valid


class SyntaxErrorRule(Rule):
    code, name, severity = "DDP000", "syntax-error", "error"
    message = "syntax error"
    # Reported by the engine when parsing fails; the rule carries docs and examples.
    valid = [
        Valid("import torch.distributed as dist\ndist.barrier()\n"),
        Valid("x = 1\n"),
        Valid("match command:\n    case 'train':\n        pass\n"),
        Valid("def f(a, /, b, *, c):\n    return a\n"),
        Valid("print(f'{x!r:>{width}}')\n"),
        Valid("async def main():\n    async with lock:\n        await step()\n"),
    ]
    invalid = [
        Invalid("def train(:\n    pass\n", line=1, column=11),
        Invalid("import torch\nx = (1,\n", line=2, column=5),
        Invalid("import torch\nif True\n    pass\n", line=2, column=8),
        Invalid("import torch\nclass A:\npass\n", line=3, column=1),
        Invalid("x = 1 +\n", line=1, column=8),
        Invalid("for i in range(3) print(i)\n", line=1, column=19),
    ]

    def check(self, index):
        return ()
