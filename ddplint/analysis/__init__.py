"""Stage 2 of the pipeline, the judge: the named files whose screen passed,
parsed once with libcst into one semantic index (``semantic``) that the rules
query, with shared answers about values (``values``), ranks (``ranks``), models
(``models``), training loops (``flow``) and, for findings only, positions
(``positions``)."""
