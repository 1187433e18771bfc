"""The agent example of docs/agents.md, both ways, runs as written: each
file under docs/examples is in the page verbatim, and prints what its
comments say."""

import os
import pathlib
import subprocess
import sys

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
PRINTS = "{'north': 165, 'south': 80}\nnorth,165\nsouth,80\n"


@pytest.mark.parametrize("name", ["agent_native.py", "agent_e2b.py"])
def test_the_agent_example_runs_as_written(name):
    source = (DOCS / "examples" / name).read_text()
    assert source in (DOCS / "agents.md").read_text(), f"docs/agents.md does not hold examples/{name} as it is"
    run = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=300,
                         env=os.environ.copy())
    assert run.returncode == 0, run.stderr
    assert run.stdout == PRINTS
