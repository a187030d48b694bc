"""ddplint's rules, one module per rule (shipped as ``ddplint.rules``).

Each module holds the rule's documentation (its docstring), its VALID and
INVALID examples (run by tests/test_rule_examples.py) and its check.
"""
