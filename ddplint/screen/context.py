"""The text test of DDP context, shared by the screen and the judge (no libcst here)."""

import re

# Text without which a module cannot be in DDP context on its own: importing or
# naming torch.distributed (also ``from torch import distributed``),
# DistributedDataParallel, FullyShardedDataParallel, fully_shard or
# init_process_group, or building a DistributedSampler (RULES.md, Clarifications).
# The engine skips (ctx) rules on files without a match
# unless project analysis puts the module in context. (A bare "distributed" is
# not enough: every Apache license header says "distributed under the License".)
DDP_CONTEXT_PATTERN = re.compile(
    r"torch\.distributed|DistributedDataParallel|FullyShardedDataParallel|fully_shard|init_process_group|DistributedSampler"
    r"|from\s+torch\s+import[^\n]*\bdistributed\b|from\s+torch\s+import\s*\([^)]*\bdistributed\b")
