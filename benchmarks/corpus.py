"""Lay out the benchmark corpus (benchmarks/README.md) from fetched mirrors.

    python benchmarks/corpus.py /tmp/corpus      # then: python benchmarks/bench.py /tmp/corpus
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mirrors import lay_out_snapshot  # noqa: E402

CORPUS = {
    "microsoft/DeepSpeed": "38327e07f6cd39b63418f60cedd1651b0be3e7c3",
    "NVIDIA/Megatron-LM": "d98e8a64ddf34856e74b24714e3bedb2f5a39553",
    "huggingface/accelerate": "16cb6eb80dd9aa8b4df1a63ef57863e455d53b83",
    "huggingface/diffusers": "58eb52c0803ea9af3abec60841c2a093bdf1f951",
    "pytorch/examples": "77f55b912142e11fcfdf5b530231fb9c52f181e8",
    "facebookresearch/fairseq": "3d262bb25690e4eb2e7d3c1309b1e9c406ca4b99",
    "huggingface/pytorch-image-models": "aa4b5850c1543fa488abf260f18390eda46cf85d",
    "Lightning-AI/pytorch-lightning": "7f0c3436cd3f6ad3753125672024fc415cbcb414",
}


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip())
        return 2
    target = Path(sys.argv[1])
    for name, commit in CORPUS.items():
        folder = lay_out_snapshot(name, commit, target / name.replace("/", "+"))
        print(f"{name}@{commit[:7]}: {sum(1 for _ in folder.rglob('*.py'))} .py files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
