"""The README's test command is what CI runs."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```bash\n(python3 -m venv .*)\n```", readme)
    assert len(commands) == 2, commands
    demo, tests = commands
    assert "trnscipy.demo" in demo and "pytest" in tests
    assert tests in (ROOT / ".ci" / "run").read_text()
