# The program of a SandboxFusion `pytest` request (see sandbox_fusion.rs):
# the request's code is a test file, given to the job as an input file, and
# this runs it with the runtime's baked-in pytest. The exit status is
# pytest's: 0 when every test passed, 1 when one failed, 5 when none was
# collected.
import sys

import pytest

sys.exit(int(pytest.main([
    "-q",
    # The cache would be a file the job leaves behind, and nothing reads it.
    "-p", "no:cacheprovider",
    # The runtime imports hypothesis before pytest starts, so pytest cannot
    # rewrite it; that warning is about the sandbox, not about the tests.
    "-W", "ignore::pytest.PytestAssertRewriteWarning",
    "test_solution.py",
])))
