"""The training-loop rules' messages name the consequence in the user's terms."""

import textwrap
from pathlib import Path

from ddplint.config import Settings
from ddplint.engine import Linter


def messages(code: str, source: str) -> list[str]:
    linter = Linter(Settings(select=(code,), root=Path.cwd()))
    result = linter.lint_source(textwrap.dedent(source).lstrip("\n"), "train.py")
    return [d.message for d in result.diagnostics]


DDP = """
from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(net)
"""


def test_ddp002_names_k_when_it_is_a_literal():
    found = messages("DDP002", DDP + """
for i, (x, y) in enumerate(loader):
    model(x).sum().backward()
    if (i + 1) % 4 == 0:
        optimizer.step()
""")
    assert len(found) == 1 and "4 all-reduces per optimizer step instead of 1 (k=4)" in found[0]


def test_ddp002_names_k_through_a_name_bound_to_a_literal():
    found = messages("DDP002", DDP + """
accum = 8
while True:
    for micro in range(accum):
        model(next(it)).sum().backward()
    optimizer.step()
""")
    assert len(found) == 1 and "8 all-reduces per optimizer step instead of 1 (k=8)" in found[0]


def test_ddp002_says_reduce_scatter_for_an_fsdp_model():
    found = messages("DDP002", """
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = FSDP(net)
for batch in loader:
    for micro in range(4):
        model(batch[micro]).mean().backward()
    optimizer.step()
""")
    assert len(found) == 1 and "FSDP reduce-scatters the gradients" in found[0] \
        and "4 reduce-scatters per optimizer step instead of 1 (k=4)" in found[0]


def test_ddp002_says_k_when_it_is_not_known():
    found = messages("DDP002", DDP + """
for i, (x, y) in enumerate(loader):
    model(x).sum().backward()
    if (i + 1) % args.accum == 0:
        optimizer.step()
""")
    assert len(found) == 1 and "k all-reduces per optimizer step instead of 1" in found[0]


def test_ddp001_messages_differ_for_evaluation_and_training():
    evaluation = messages("DDP001", """
import torch
outputs = []
for x in loader:
    outputs.append(model(x))
""")
    training = messages("DDP001", """
import torch
history = []
for x in loader:
    loss = model(x).mean()
    loss.backward()
    history.append(loss)
""")
    assert "no backward() frees it" in evaluation[0] and "out-of-memory" in evaluation[0]
    assert "`loss`" in training[0] and "memory grows each step" in training[0]


def test_ddp014_leaving_and_skipping_say_what_the_peers_do():
    found = messages("DDP014", """
import torch
import torch.distributed as dist
rank = dist.get_rank()
for batch in loader:
    loss = model(batch).mean()
    if torch.isnan(loss):
        continue
    loss.backward()
    if rank == 0 and time_is_up():
        break
""")
    assert len(found) == 2
    assert "skip backward()" in found[0] and "leave the training loop" in found[1]
