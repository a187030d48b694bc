"""The README's promises that can drift: the first commands and the rules table."""

import re
from pathlib import Path

from ddplint.registry import all_rules

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_rules_table_matches_the_registry():
    rows = dict(re.findall(r"^\| (DDP\d{3}) \| ([a-z0-9-]+) \|", README, re.M))
    for rule in all_rules():
        assert rows.get(rule.code) == rule.name, f"README rules table is out of date for {rule.code}"


def test_first_commands_name_a_shipped_fixture_and_the_test_command():
    blocks = re.findall(r"```sh\n(.*?)\n```", README, re.S)
    first, second = blocks[0].strip(), blocks[1].strip()
    fixture = re.search(r"ddplint (\S+\.py)", first).group(1)
    assert (ROOT / fixture).is_file()
    assert (ROOT / fixture.replace(".py", ".expected")).read_text().strip(), "the example must have findings"
    assert second.endswith("python -m pytest")
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pytest" in ci and "torch==2.13.0" in ci


def test_ci_and_editor_snippets_are_well_formed():
    """The GitHub workflows parse as YAML and run ddplint the documented ways;
    the editor snippets start the server as `ddplint server`."""
    import json
    import tomllib

    import yaml

    workflows = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", README, re.S)
                 if block.startswith("name:")]
    steps = {w["name"]: [s.get("run", s.get("uses", "")) for s in w["jobs"]["ddplint"]["steps"]] for w in workflows}
    assert "ddplint --format github ." in steps["ddplint"]
    assert any(step.startswith("github/codeql-action/upload-sarif@") for step in steps["ddplint code scanning"])
    assert any("--format sarif -o ddplint.sarif" in step for step in steps["ddplint code scanning"])
    assert any("git diff --name-only" in step and "--force-exclude" in step for step in steps["ddplint changed files"])

    helix = tomllib.loads(re.search(r"```toml\n(\[language-server\.ddplint\].*?)```", README, re.S).group(1))
    assert helix["language-server"]["ddplint"] == {"command": "ddplint", "args": ["server"]}
    vscode = json.loads(re.search(r"```json\n(\{\n  \"glspc.*?)```", README, re.S).group(1))
    assert [vscode["glspc.server.command"], *vscode["glspc.server.commandArguments"]] == ["ddplint", "server"]
    assert README.count('cmd = { "ddplint", "server" }') == 2 and '("ddplint" "server")' in README
