"""Stage 1 of the pipeline, the screen: every Python file of the project, read
with CPython's ``ast`` (cheap, cached by content hash). It yields the module's
project facts (``facts``), joined across the project (``project``)."""
