"""A session's files through the Python client against a real stack:
uploads the session's code reads, files its code writes read back, listings,
deletes, typed errors for bad paths and missing files, an exec's `files` and
`return_files`, and the async client."""

from __future__ import annotations

import asyncio
import base64

import pytest

import runbox
from runbox import AsyncClient, Client

from .conftest import TOKEN

BINARY = bytes(range(256)) * 3


@pytest.fixture
def client(stack):
    with Client(stack.url, TOKEN) as client:
        yield client


def test_files_go_in_and_out_of_a_session(client):
    with client.create_session("python") as session:
        written = session.upload_file("data/in put.csv", "a,b\n1,2\n")
        assert (written.path, written.size) == ("data/in put.csv", 8)
        assert session.upload_file("blob.bin", BINARY).size == len(BINARY)

        # The session's code sees the uploads in its working directory, and what it writes is read back.
        ran = session.exec(
            "rows = open('data/in put.csv').read().splitlines()\n"
            "print(len(rows), len(open('blob.bin', 'rb').read()))\n"
            "open('data/out é.txt', 'w').write('from the session\\n')"
        )
        assert (ran.exit_code, ran.stdout) == (0, "2 768\n"), ran.stderr
        assert session.read_file("data/out é.txt") == b"from the session\n"
        assert session.read_file("blob.bin") == BINARY

        home = session.list_files()
        assert home.path == "" and not home.truncated
        by_name = {f.name: f for f in home.files}
        assert by_name["data"].type == "directory"
        assert (by_name["blob.bin"].type, by_name["blob.bin"].size, by_name["blob.bin"].path) == ("file", 768, "blob.bin")
        assert by_name["blob.bin"].modified
        data = session.list_files("data")
        assert data.path == "data"
        assert sorted(f.path for f in data.files) == ["data/in put.csv", "data/out é.txt"]

        session.delete_file("data/in put.csv")
        assert [f.name for f in session.list_files("data").files] == ["out é.txt"]
        with pytest.raises(runbox.NotFound) as gone:
            session.read_file("data/in put.csv")
        assert (gone.value.status, gone.value.code) == (404, "no_file")
        session.delete_file("data")
        assert "data" not in {f.name for f in session.list_files().files}


def test_file_errors_are_typed(client):
    with client.create_session("python") as session:
        for bad in ("../etc/passwd", "a/../../b"):
            with pytest.raises(runbox.InvalidRequest) as refused:
                session.upload_file(bad, "x")
            assert (refused.value.status, refused.value.code) == (400, "invalid_path"), bad
        session.upload_file("dir/f.txt", "x")
        with pytest.raises(runbox.InvalidRequest) as directory:
            session.read_file("dir")
        assert (directory.value.status, directory.value.code) == (422, "not_a_file")
        with pytest.raises(runbox.InvalidRequest) as through:
            session.list_files("dir/f.txt")
        assert through.value.code == "not_a_directory"
        with pytest.raises(runbox.NotFound) as missing:
            session.delete_file("nothing-here")
        assert missing.value.code == "no_file"
    with pytest.raises(runbox.SessionEnded) as ended:
        client.read_file(session.id, "dir/f.txt")
    assert ended.value.code == "session_closed"


def test_an_exec_takes_files_and_returns_what_it_wrote(client):
    with client.create_session("python") as session:
        packed = base64.b64encode(b"\x00\x01\x02").decode()
        ran = session.exec(
            "n = len(open('in/b.bin', 'rb').read())\n"
            "open('out.txt', 'w').write(open('in/a.txt').read().upper() + str(n))",
            files=[{"path": "in/a.txt", "content": "abc"}, {"path": "in/b.bin", "content": packed, "encoding": "base64"}],
            return_files=True,
        )
        assert ran.exit_code == 0, ran.stderr
        returned = {f.path: f for f in ran.files}
        assert base64.b64decode(returned["out.txt"].content) == b"ABC3"
        assert returned["out.txt"].size == 4 and not returned["out.txt"].truncated
        # The given files stay in the session; a list of paths returns just those.
        again = session.exec("open('out.txt', 'a').write('!')", return_files=["out.txt"])
        assert [(f.path, base64.b64decode(f.content)) for f in again.files] == [("out.txt", b"ABC3!")]
        assert session.read_file("in/a.txt") == b"abc"


def test_async_session_files(stack):
    async def main():
        async with AsyncClient(stack.url, TOKEN) as client:
            async with await client.create_session("python") as session:
                assert (await session.upload_file("x/y.txt", b"bytes")).size == 5
                ran = await session.exec("print(open('x/y.txt').read())", files=[{"path": "z.txt", "content": "z"}])
                assert ran.stdout == "bytes\n"
                assert await session.read_file("z.txt") == b"z"
                listed = await session.list_files("x")
                assert [(f.name, f.type, f.size) for f in listed.files] == [("y.txt", "file", 5)]
                await session.delete_file("x/y.txt")
                assert (await session.list_files("x")).files == []
                with pytest.raises(runbox.NotFound):
                    await session.read_file("x/y.txt")

    asyncio.run(main())
