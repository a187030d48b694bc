"""The training-loop model (ddplint/analysis/flow.py): what survives an
iteration, which loops run over data, helper objects that backward and step,
values every rank agrees on, containers filled with graph tensors."""

import textwrap

import libcst as cst

from ddplint.analysis import flow
from ddplint.analysis.semantic import SemanticIndex


def index_of(source: str) -> SemanticIndex:
    source = textwrap.dedent(source).lstrip("\n")
    return SemanticIndex.build(cst.parse_module(source), source, "train.py")


def call(index: SemanticIndex, method: str, occurrence: int = 0):
    return index.method_calls(method)[occurrence]


def test_a_reset_skipped_by_continue_does_not_reset():
    index = index_of("""
        def train(loader, k):
            acc = []
            for i, xb in enumerate(loader):
                acc.append(xb)
                if i % k:
                    continue
                acc = []
    """)
    site = call(index, "append")
    loops = flow.enclosing_loops(index, site.node)
    assert flow.surviving_loops(index, "acc", site.node, loops) == loops


def test_a_reset_on_every_path_resets():
    index = index_of("""
        def train(loader):
            acc = []
            for xb in loader:
                acc.append(xb)
                if xb is None:
                    acc = []
                    continue
                acc = []
    """)
    site = call(index, "append")
    assert flow.surviving_loops(index, "acc", site.node, flow.enclosing_loops(index, site.node)) == []


def test_a_reset_in_the_outer_loop_leaves_only_the_inner_one():
    index = index_of("""
        def train(loader):
            for batch in loader:
                parts = []
                for chunk in batch:
                    parts.append(chunk)
    """)
    site = call(index, "append")
    inner, outer = flow.enclosing_loops(index, site.node)
    assert flow.surviving_loops(index, "parts", site.node, [inner, outer]) == [inner]


def test_data_loops_and_part_loops():
    index = index_of("""
        for x in loader: pass
        for i, b in enumerate(train_dl): pass
        for it in range(max_iters): pass
        for j in range(len(parts)): pass
        for h in heads: pass
        for v in range(self.num_views): pass
        while True: pass
    """)
    kinds = [flow.is_data_loop(index, loop) for loop in index.loops]
    assert kinds == [True, True, True, False, False, False, True]


def test_config_loops():
    index = index_of("""
        for name, op in self.optimizers.items(): pass
        for group in optimizer.param_groups: pass
        for k, v in batch.items(): pass
        for x in loader: pass
    """)
    assert [flow.iterates_config(index, loop) for loop in index.loops] == [True, True, False, False]


def test_helper_step_calls_need_the_loss_an_optimizer_and_a_step_flag():
    index = index_of("""
        for i, (x, y) in enumerate(loader):
            loss = model(x).sum()
            loss_scaler(loss, optimizer, update_grad=(i + 1) % 4 == 0)
            loss_scaler(loss, optimizer, update_grad=True)
            log(loss, optimizer, every=(i + 1) % 4 == 0)
    """)
    found = [index.module.code_for_node(site.node.func) for site, _ in flow.helper_step_calls(index)]
    assert found == ["loss_scaler", "log"]  # the rule decides whether the flag is an accumulation test


def test_helper_step_calls_skip_visible_helpers_without_backward():
    index = index_of("""
        def log(loss, optimizer, every):
            print(loss.item())

        for i, x in enumerate(loader):
            loss = model(x).sum()
            log(loss, optimizer, every=(i + 1) % 4 == 0)
    """)
    assert flow.helper_step_calls(index) == []


def test_agreed_values_read_the_collectives_tensor_only():
    index = index_of("""
        import torch
        def step(loss):
            done = torch.tensor(0)
            torch.distributed.all_reduce(done, torch.distributed.ReduceOp.SUM)
            if torch.isnan(loss):
                raise ValueError
    """)
    test = index.ifs[0].test
    assert flow.is_agreed_value(index, "done", test)
    assert not flow.is_agreed_value(index, "torch", test)
    assert not flow.is_agreed_value(index, "loss", test)


def test_a_helper_that_all_reduces_and_returns_gives_an_agreed_value():
    index = index_of("""
        import torch.distributed as dist
        def any_bad(loss):
            flag = loss.isnan().float()
            dist.all_reduce(flag)
            return flag

        def train(loader):
            for x in loader:
                loss = model(x).mean()
                bad = any_bad(loss)
                if bad:
                    continue
                loss.backward()
    """)
    assert flow.is_agreed_value(index, "bad", index.ifs[0].test)


def test_containers_filled_with_graph_tensors_carry_history():
    index = index_of("""
        import torch
        def forward_all(model, xs):
            outs = []
            for x in xs:
                outs.append(model(x))
            names = []
            for x in xs:
                names.append(str(x))
            return torch.cat(outs), names
    """)
    returned = index.exits[0].value
    outs, names = returned.elements[0].value, returned.elements[1].value
    assert flow.carries_graph(index, outs, 10**6)
    assert not flow.carries_graph(index, names, 10**6)


def test_augmented_assignments_keep_their_targets_history():
    index = index_of("""
        def train(net, xb, n):
            snap = net(xb).mean().clone()
            snap /= n
            history.append(snap)
    """)
    site = call(index, "append")
    assert flow.carries_graph(index, site.node.args[0].value, site.order)


def test_factory_calls_are_not_model_calls():
    index = index_of("""
        for cfg in cfgs:
            replicas.append(factory.build_model(cfg))
            outputs.append(self.teacher_model(cfg))
    """)
    first, second = index.method_calls("append")
    assert not flow.carries_graph(index, first.node.args[0].value, first.order)
    assert flow.carries_graph(index, second.node.args[0].value, second.order)


def test_a_reset_on_both_arms_of_an_if_resets():
    index = index_of("""
        def train(loader):
            acc = []
            for xb in loader:
                if xb is None:
                    acc = []
                else:
                    acc = [xb]
                acc.append(xb)
    """)
    site = call(index, "append")
    assert flow.surviving_loops(index, "acc", site.node, flow.enclosing_loops(index, site.node)) == []


def test_a_module_that_gets_a_wrapped_model_back_is_in_ddp_context():
    from ddplint.screen.facts import summarize
    from ddplint.screen.project import Project

    utils = textwrap.dedent("""
        from torch.nn.parallel import DistributedDataParallel as DDP
        def setup_for_distributed_mode(model, optimizer, local_rank):
            if local_rank != -1:
                model = DDP(model, device_ids=[local_rank])
            return model, optimizer
    """)
    trainer = textwrap.dedent("""
        from utils import setup_for_distributed_mode
        class Trainer:
            def __init__(self, model, optimizer, local_rank):
                model, optimizer = setup_for_distributed_mode(model, optimizer, local_rank)
                self.encoder = model
    """)
    project = Project([summarize(utils, "utils.py"), summarize(trainer, "trainer.py")])
    assert project.modules["utils.py"].functions["setup_for_distributed_mode"].returns_wrapped == {"0": "ddp"}
    assert project.module_in_ddp_context("trainer.py")


def test_parts_loops_are_recognised_positively():
    index = index_of("""
        for j in range(len(parts)): pass
        for i in range(4): pass
        for stage in zero_stages: pass
        for i in range(self.num_crops): pass
        for group in optimizer.param_groups: pass
        for x in loader: pass
        for it in range(max_iters): pass
        for i in range(len(train_loader)): pass
        for x in xs: pass
    """)
    kinds = [flow.is_parts_loop(index, loop) for loop in index.loops]
    assert kinds == [True, True, True, True, True, False, False, False, False]
