"""E2B's Python SDK (e2b-code-interpreter==2.11.5 on e2b==2.63.0), unchanged
and synchronous, against runbox's /e2b on a real stack (run under
clients/with-stack; conftest.py points the SDK there).

Each test creates its own sandbox and kills it when it ends: a token holds
only a few sessions at once, and a sandbox may hold two (its Python and its
JavaScript context)."""

import datetime

import pytest
from conftest import (
    OTHER_TOKEN,
    PROBE_CODE,
    WRONG_TOKENS,
    raw_execute,
    raw_list_dir,
    raw_read,
    raw_write,
)
from e2b_code_interpreter import (
    E2B,
    AuthenticationException,
    FileNotFoundException,
    FileType,
    InvalidArgumentException,
    Sandbox,
    SandboxException,
    SandboxNotFoundException,
    SandboxState,
    TimeoutException,
)

HOME = "/home/user"


@pytest.fixture
def sandbox():
    sbx = Sandbox.create()
    try:
        yield sbx
    finally:
        Sandbox.kill(sbx.sandbox_id)


@pytest.fixture
def other():
    """A client of the second token."""
    return E2B(api_key=OTHER_TOKEN)


def listed_ids(sandbox_class=Sandbox, **opts):
    """Every sandbox id Sandbox.list() returns, all pages."""
    paginator = sandbox_class.list(**opts)
    ids = []
    while paginator.has_next:
        ids += [info.sandbox_id for info in paginator.next_items()]
    return ids


def listed(sandbox_id):
    paginator = Sandbox.list()
    while paginator.has_next:
        for info in paginator.next_items():
            if info.sandbox_id == sandbox_id:
                return info
    return None


# Control plane


def test_create_makes_a_running_code_interpreter_sandbox(sandbox):
    assert sandbox.sandbox_id
    info = sandbox.get_info()
    assert info.sandbox_id == sandbox.sandbox_id
    assert info.template_id == "code-interpreter-v1"
    assert info.state == SandboxState.RUNNING
    assert info.started_at <= info.end_at
    # No timeout asked: E2B's default, 300 seconds.
    assert abs((info.end_at - info.started_at).total_seconds() - 300) < 30, info
    assert sandbox.is_running() is True
    # The create reply gave the sandbox its own data-plane token.
    assert sandbox._envd_access_token


def test_create_takes_a_timeout_and_set_timeout_moves_the_end():
    sbx = Sandbox.create(timeout=120)
    try:
        info = sbx.get_info()
        assert abs((info.end_at - info.started_at).total_seconds() - 120) < 30, info
        sbx.set_timeout(1800)
        moved = Sandbox.get_info(sbx.sandbox_id)
        left = moved.end_at - datetime.datetime.now(datetime.timezone.utc)
        assert datetime.timedelta(minutes=25) < left <= datetime.timedelta(minutes=31), moved
        # Still the same sandbox, still running.
        assert sbx.run_code("6 * 7").text == "42"
    finally:
        sbx.kill()


def test_list_shows_the_callers_sandboxes_only(sandbox, other):
    info = listed(sandbox.sandbox_id)
    assert info is not None, "the owner's list lacks its sandbox"
    assert info.template_id == "code-interpreter-v1"
    assert info.state == SandboxState.RUNNING
    assert sandbox.sandbox_id not in listed_ids(other.Sandbox)


def test_connect_reaches_the_same_sandbox(sandbox):
    sandbox.run_code("shared = 'from the first handle'")
    again = Sandbox.connect(sandbox.sandbox_id)
    assert again.sandbox_id == sandbox.sandbox_id
    assert again.run_code("shared").text == "from the first handle"


def test_kill_ends_the_sandbox():
    sbx = Sandbox.create()
    sandbox_id = sbx.sandbox_id
    try:
        assert sbx.kill() is True
        assert Sandbox.kill(sandbox_id) is False
        with pytest.raises(SandboxNotFoundException):
            Sandbox.connect(sandbox_id)
        with pytest.raises(SandboxNotFoundException):
            Sandbox.get_info(sandbox_id)
        assert sbx.is_running() is False
        assert sandbox_id not in listed_ids()
    finally:
        Sandbox.kill(sandbox_id)


def test_a_wrong_api_key_is_an_authentication_error():
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="not-a-runbox-token-0123456789")
    with pytest.raises(AuthenticationException):
        Sandbox.list(api_key="not-a-runbox-token-0123456789").next_items()


def test_pause_then_connect_resumes_with_state_and_files(sandbox):
    sandbox.run_code("kept = 'set before the pause'")
    sandbox.files.write("kept.txt", "written before the pause")
    assert sandbox.pause() is True
    assert Sandbox.pause(sandbox.sandbox_id) is False, "a second pause is a 409"
    assert sandbox.get_info().state == SandboxState.PAUSED
    assert listed(sandbox.sandbox_id).state == SandboxState.PAUSED

    resumed = Sandbox.connect(sandbox.sandbox_id)
    assert resumed.get_info().state == SandboxState.RUNNING
    assert resumed.run_code("kept").text == "set before the pause"
    assert resumed.files.read("kept.txt") == "written before the pause"
    # The handle from before the pause keeps its access token: the SDK's
    # instance connect() does not take the reply's.
    assert sandbox.run_code("kept.upper()").text == "SET BEFORE THE PAUSE"


def test_instance_connect_resumes_a_paused_sandbox(sandbox):
    sandbox.run_code("n = 7")
    assert sandbox.pause() is True
    assert sandbox.connect() is sandbox
    assert sandbox.get_info().state == SandboxState.RUNNING
    assert sandbox.run_code("n * 6").text == "42"


# Code interpreter


def test_state_is_kept_between_run_code_calls(sandbox):
    first = sandbox.run_code("x = 21")
    assert first.error is None
    assert first.text is None, "an assignment has no value"
    execution = sandbox.run_code("x * 2")
    assert execution.error is None
    assert execution.text == "42"
    assert [r.is_main_result for r in execution.results] == [True]


def test_stdout_and_stderr_reach_the_callbacks_and_the_logs(sandbox):
    out, err = [], []
    execution = sandbox.run_code(
        "import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)",
        on_stdout=out.append,
        on_stderr=err.append,
    )
    assert execution.error is None
    assert "".join(execution.logs.stdout) == "to stdout\n"
    assert "".join(execution.logs.stderr) == "to stderr\n"
    assert "".join(m.line for m in out) == "to stdout\n"
    assert "".join(m.line for m in err) == "to stderr\n"
    assert all(m.error is False for m in out) and all(m.error is True for m in err)


def test_output_printed_over_time_arrives_through_the_callback(sandbox):
    code = "import time\nfor i in range(5):\n    print('tick', i, flush=True)\n    time.sleep(0.3)\n'done'"
    lines = []
    execution = sandbox.run_code(code, on_stdout=lines.append)
    expected = "".join(f"tick {i}\n" for i in range(5))
    assert "".join(m.line for m in lines) == expected
    assert "".join(execution.logs.stdout) == expected
    assert execution.text == "done"


def test_an_exception_is_an_execution_error(sandbox):
    errors = []
    execution = sandbox.run_code("def divide():\n    return 1 / 0\n\ndivide()", on_error=errors.append)
    error = execution.error
    assert error is not None
    assert error.name == "ZeroDivisionError"
    assert "division by zero" in error.value
    assert isinstance(error.traceback, str) and "ZeroDivisionError" in error.traceback
    assert errors == [error]
    assert execution.text is None
    # The context survives its error.
    assert sandbox.run_code("'still' + ' here'").text == "still here"


@pytest.mark.parametrize("language", ["js", "javascript"])
def test_javascript_runs_with_state_kept(sandbox, language):
    assert sandbox.run_code("globalThis.y = 5", language=language).error is None
    execution = sandbox.run_code("y + 1", language=language)
    assert execution.error is None, execution.error
    assert execution.text == "6"
    logged = sandbox.run_code("console.log('from js', y * 2)", language=language)
    assert "".join(logged.logs.stdout) == "from js 10\n"
    # JavaScript's state is its own: Python has no y.
    assert sandbox.run_code("'y' in globals()").text == "False"


def test_js_and_javascript_name_the_same_context(sandbox):
    sandbox.run_code("globalThis.z = 7", language="js")
    assert sandbox.run_code("z * 6", language="javascript").text == "42"


def test_a_javascript_error_is_an_execution_error(sandbox):
    execution = sandbox.run_code("null.property", language="js")
    assert execution.error is not None
    assert execution.error.name == "TypeError"
    assert execution.error.value


def test_a_new_context_has_its_own_state(sandbox):
    sandbox.run_code("secret = 'default context'")
    context = sandbox.create_code_context()
    assert context.id
    assert context.language == "python"
    assert sandbox.run_code("'secret' in globals()", context=context).text == "False"
    sandbox.run_code("own = 'new context'", context=context)
    assert sandbox.run_code("own", context=context).text == "new context"
    assert sandbox.run_code("'own' in globals()").text == "False"
    assert sandbox.run_code("secret").text == "default context"


def test_contexts_made_at_once_are_all_kept(sandbox):
    # Each context is a session: two at once, beside the sandbox's own,
    # stay within a token's share of the stack's session places.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        made = list(pool.map(lambda _: sandbox.create_code_context(), range(2)))
    listed = {context.id for context in sandbox.list_code_contexts()}
    assert {context.id for context in made} <= listed
    for context in made:
        sandbox.remove_code_context(context)
    assert {context.id for context in sandbox.list_code_contexts()}.isdisjoint(c.id for c in made)


def test_a_client_timeout_stops_the_run_and_the_next_run_works(sandbox):
    sandbox.run_code("before = 'the timeout'")
    with pytest.raises(TimeoutException):
        sandbox.run_code("while True: pass", timeout=2)
    # Generous: the server has to notice the client left and stop the loop.
    execution = sandbox.run_code("print('after the timeout')", timeout=180)
    assert execution.error is None, execution.error
    assert "".join(execution.logs.stdout) == "after the timeout\n"


# Files


def test_a_written_file_is_seen_by_run_code(sandbox):
    info = sandbox.files.write("data/x.csv", "a,b\n1,2\n")
    assert info.name == "x.csv"
    assert info.type == FileType.FILE
    assert info.path == f"{HOME}/data/x.csv"
    # Printed, since a string's repr escapes its newlines in `text`.
    printed = sandbox.run_code("print(open('data/x.csv').read(), end='')")
    assert "".join(printed.logs.stdout) == "a,b\n1,2\n"
    execution = sandbox.run_code("import csv\nlist(csv.DictReader(open('data/x.csv')))[0]['b']")
    assert execution.text == "2"


def test_a_file_code_writes_is_read_back(sandbox):
    code = "import os\nos.makedirs('out', exist_ok=True)\nopen('out/report.txt', 'w').write('made by code')"
    assert sandbox.run_code(code).error is None
    assert sandbox.files.read("out/report.txt") == "made by code"
    assert sandbox.files.read(f"{HOME}/out/report.txt") == "made by code"


def test_bytes_round_trip(sandbox):
    data = bytes(range(256)) * 4
    sandbox.files.write("blob.bin", data)
    assert bytes(sandbox.files.read("blob.bin", format="bytes")) == data
    assert sandbox.run_code("open('blob.bin', 'rb').read() == bytes(range(256)) * 4").text == "True"
    sandbox.run_code("open('made.bin', 'wb').write(bytes([0, 255, 10, 13, 0]))")
    assert bytes(sandbox.files.read("made.bin", format="bytes")) == b"\x00\xff\n\r\x00"


def test_an_empty_file_reads_as_empty(sandbox):
    sandbox.files.write("empty.txt", "")
    assert sandbox.files.read("empty.txt") == ""
    assert sandbox.files.get_info("empty.txt").size == 0


def test_list_exists_and_get_info(sandbox):
    sandbox.files.write("tree/a.txt", "aaa")
    sandbox.files.write("tree/sub/b.txt", "b")
    entries = {entry.name: entry for entry in sandbox.files.list("tree")}
    assert set(entries) == {"a.txt", "sub"}
    assert entries["a.txt"].type == FileType.FILE
    assert entries["a.txt"].path == f"{HOME}/tree/a.txt"
    assert entries["a.txt"].size == 3
    assert entries["sub"].type == FileType.DIR
    assert entries["sub"].path == f"{HOME}/tree/sub"

    assert sandbox.files.exists("tree/a.txt") is True
    assert sandbox.files.exists("tree/sub") is True
    assert sandbox.files.exists("tree/missing.txt") is False

    info = sandbox.files.get_info("tree/a.txt")
    assert (info.name, info.type, info.path, info.size) == ("a.txt", FileType.FILE, f"{HOME}/tree/a.txt", 3)
    assert isinstance(info.modified_time, datetime.datetime)
    assert info.modified_time.year >= 2024
    directory = sandbox.files.get_info("tree/sub")
    assert (directory.name, directory.type) == ("sub", FileType.DIR)


def test_make_dir_rename_and_remove(sandbox):
    assert sandbox.files.make_dir("made/deeper") is True
    assert sandbox.files.make_dir("made/deeper") is False, "it exists already"
    assert sandbox.files.get_info("made/deeper").type == FileType.DIR

    sandbox.files.write("notes.txt", "moving")
    moved = sandbox.files.rename("notes.txt", "made/deeper/renamed.txt")
    assert moved.name == "renamed.txt"
    assert moved.path == f"{HOME}/made/deeper/renamed.txt"
    assert sandbox.files.exists("notes.txt") is False
    assert sandbox.files.read("made/deeper/renamed.txt") == "moving"
    assert sandbox.run_code("open('made/deeper/renamed.txt').read()").text == "moving"

    sandbox.files.remove("made/deeper/renamed.txt")
    assert sandbox.files.exists("made/deeper/renamed.txt") is False
    sandbox.files.write("made/deeper/again.txt", "x")
    sandbox.files.remove("made")
    assert sandbox.files.exists("made") is False
    assert sandbox.run_code("import os\nos.path.exists('made')").text == "False"


def test_a_missing_file_is_file_not_found(sandbox):
    with pytest.raises(FileNotFoundException):
        sandbox.files.read("does-not-exist.txt")
    with pytest.raises(FileNotFoundException):
        sandbox.files.get_info("does-not-exist.txt")
    with pytest.raises(FileNotFoundException):
        sandbox.files.list("no-such-dir")
    with pytest.raises(FileNotFoundException):
        sandbox.files.rename("does-not-exist.txt", "elsewhere.txt")


def test_absolute_paths_under_home_are_the_home(sandbox):
    sandbox.files.write(f"{HOME}/abs.txt", "absolute")
    assert sandbox.files.read("abs.txt") == "absolute"
    assert sandbox.run_code("open('abs.txt').read()").text == "absolute"
    assert "abs.txt" in {entry.name for entry in sandbox.files.list(HOME)}


# Paths that leave E2B's home: absolute elsewhere, or climbing out of it.
OUTSIDE = ["/etc/passwd", "../x", "data/../../x", "/home/other/x", "/"]


def test_a_path_outside_the_home_is_refused(sandbox):
    for path in OUTSIDE:
        with pytest.raises(InvalidArgumentException):
            sandbox.files.read(path)
        with pytest.raises(InvalidArgumentException):
            sandbox.files.write(path, "escape")
        with pytest.raises(InvalidArgumentException):
            sandbox.files.get_info(path)
        with pytest.raises(InvalidArgumentException):
            sandbox.files.make_dir(path)
    with pytest.raises(InvalidArgumentException):
        sandbox.files.list("/etc")
    sandbox.files.write("inside.txt", "x")
    with pytest.raises(InvalidArgumentException):
        sandbox.files.rename("inside.txt", "../inside.txt")
    assert sandbox.files.read("inside.txt") == "x"


# Commands


def test_commands_run_says_there_is_no_shell(sandbox):
    # The SDK's own timeout turns a hang into a TimeoutException, which fails
    # the checks below.
    with pytest.raises(SandboxException) as raised:
        sandbox.commands.run("ls", timeout=30)
    message = str(raised.value)
    assert "no shell" in message, message
    assert "run_code" in message, message
    assert not isinstance(raised.value, TimeoutException), message


# Isolation


def test_the_second_token_reaches_nothing_of_the_firsts(sandbox, other):
    sandbox.run_code("owner = 'still here'")
    sandbox_id = sandbox.sandbox_id
    with pytest.raises(SandboxNotFoundException):
        other.Sandbox.connect(sandbox_id)
    assert other.Sandbox.kill(sandbox_id) is False
    with pytest.raises(SandboxNotFoundException):
        other.Sandbox.set_timeout(sandbox_id, 10)
    with pytest.raises(SandboxNotFoundException):
        other.Sandbox.get_info(sandbox_id)
    with pytest.raises(SandboxNotFoundException):
        other.Sandbox.pause(sandbox_id)
    # None of it touched the sandbox.
    info = sandbox.get_info()
    assert info.state == SandboxState.RUNNING
    assert (info.end_at - info.started_at).total_seconds() > 60, "the other token's set_timeout applied"
    assert sandbox.run_code("owner").text == "still here"


@pytest.mark.parametrize(("what", "token"), WRONG_TOKENS, ids=[w for w, _ in WRONG_TOKENS])
def test_execute_needs_the_sandboxs_access_token(sandbox, what, token):
    response = raw_execute(sandbox.sandbox_id, token, PROBE_CODE.format(name="refused.txt"))
    # Whether the code ran, asked with the owner's token, says more than the
    # status alone when this fails.
    ran = sandbox.files.exists("refused.txt")
    assert (response.status_code, ran) == (401, False), (what, response.text)
    # The same request with the sandbox's own token runs, so the probe above
    # could have seen the code run.
    allowed = raw_execute(sandbox.sandbox_id, sandbox._envd_access_token, PROBE_CODE.format(name="allowed.txt"))
    assert allowed.status_code == 200, allowed.text
    assert sandbox.files.read("allowed.txt") == "the probe ran"


@pytest.mark.parametrize(("what", "token"), WRONG_TOKENS, ids=[w for w, _ in WRONG_TOKENS])
def test_files_need_the_sandboxs_access_token(sandbox, what, token):
    sandbox.files.write("private.txt", "owner's data")
    sandbox_id = sandbox.sandbox_id
    read = raw_read(sandbox_id, token, "private.txt")
    assert read.status_code == 401, (what, read.status_code, read.text)
    assert "owner's data" not in read.text
    write = raw_write(sandbox_id, token, "planted.txt", b"planted")
    assert write.status_code == 401, (what, write.status_code, write.text)
    assert sandbox.files.exists("planted.txt") is False, f"a file was written with {what}"
    listing = raw_list_dir(sandbox_id, token, "")
    assert listing.status_code == 401, (what, listing.status_code, listing.text)
    assert "private.txt" not in listing.text

    # The sandbox's own token works for each, so the probes above could fail.
    own = sandbox._envd_access_token
    assert raw_read(sandbox_id, own, "private.txt").text == "owner's data"
    assert raw_write(sandbox_id, own, "planted.txt", b"planted").status_code == 200
    assert sandbox.files.read("planted.txt") == "planted"
    own_listing = raw_list_dir(sandbox_id, own, "")
    assert own_listing.status_code == 200, own_listing.text
    assert "private.txt" in {entry["name"] for entry in own_listing.json()["entries"]}


def test_another_sandboxs_access_token_opens_nothing(sandbox, other):
    theirs = other.Sandbox.create()
    try:
        token = theirs._envd_access_token
        assert token and token != sandbox._envd_access_token
        response = raw_execute(sandbox.sandbox_id, token, PROBE_CODE.format(name="crossed.txt"))
        assert response.status_code == 401, response.text
        assert raw_read(sandbox.sandbox_id, token, "crossed.txt").status_code == 401
        assert sandbox.files.exists("crossed.txt") is False
        # And the owner of each still reaches their own.
        assert theirs.run_code("1 + 1").text == "2"
    finally:
        other.Sandbox.kill(theirs.sandbox_id)
