"""DDP025 ddp-wrapper-state-dict: keys that fail to load into the unwrapped model.

``ddp_model.state_dict()`` prefixes every key with ``module.``; a checkpoint saved from the
wrapper does not load into the plain model used for inference or a non-DDP resume.  Saves
both state dicts through ``torch.save``/``torch.load`` (in memory) and loads each into a
fresh plain model with ``strict=False``, counting the missing keys; ``strict=True`` raises.
"""

from __future__ import annotations

import io

import torch

from ddplint.runtime.harness import Measurement, ProbeContext, ddp, mlp, result

RULE, NAME = "DDP025", "ddp-wrapper-state-dict"


def missing_keys(state: dict) -> tuple[int, str]:
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    loaded = torch.load(buf, map_location="cpu")
    plain = mlp()
    missing = plain.load_state_dict(loaded, strict=False).missing_keys
    try:
        plain.load_state_dict(loaded)
        error = ""
    except RuntimeError as exc:
        error = str(exc).splitlines()[0]
    return len(missing), error


def run(ctx: ProbeContext):
    model = ddp(ctx, mlp())
    pat, error = missing_keys(model.state_dict())  # the line under test
    fix, _ = missing_keys(model.module.state_dict())
    total = len(model.module.state_dict())
    m = Measurement("state-dict keys missing when loading into the plain model", "keys", pat, fix)
    confirmed = pat == total and fix == 0 and bool(error)
    detail = f"{pat} of {total} keys carry the 'module.' prefix; strict load raises: {error}"
    return result(RULE, NAME, confirmed, [m], detail)
