#!/usr/bin/env python3
"""The pinned pure-Python packages of the Python runtime.

    packages.py fetch --lock FILE --cache DIR --out ZIP --python-version X.Y
        Gets every wheel the lock file names, from DIR or else from PyPI,
        checks its sha256 and that it is pure Python (py3-none-any), and
        merges them into one zip of sources, with `packages.json` (names and
        versions) beside it. Stops at the first problem, naming the package.

    packages.py lock --python-version X.Y NAME[==VERSION] ...
        Resolves the named packages and their dependencies to pure-Python
        wheels on PyPI and prints lock lines for them.

`prepare` calls `fetch`, then compiles the zip's modules for Pyodide's
Python and builds them into the memory snapshot (see harness/snapshot.mjs).
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile


def fail(message):
    sys.exit(f"packages: {message}")


def read_lock(path):
    entries = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 3 or not re.fullmatch(r"[0-9a-f]{64}", parts[2]):
                fail(f"{path}:{number}: expected `name version sha256`, got {line!r}")
            entries.append({"name": parts[0], "version": parts[1], "sha256": parts[2]})
    if not entries:
        fail(f"{path} names no packages")
    return entries


def normalized(name):
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_in(directory, entry):
    """The cached wheel of `entry` in `directory`, if any."""
    for file in sorted(os.listdir(directory)):
        parts = file.split("-")
        if file.endswith(".whl") and len(parts) >= 5 and normalized(parts[0]) == normalized(entry["name"]) \
                and parts[1] == entry["version"]:
            return os.path.join(directory, file)
    return None


def pip_download(args, directory):
    return [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
               "--only-binary=:all:", "--platform", "any", "--implementation", "py", "--abi", "none",
               "--python-version", args.python_version, "-d", directory]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def fetch(args):
    entries = read_lock(args.lock)
    os.makedirs(args.cache, exist_ok=True)
    missing = [e for e in entries if wheel_in(args.cache, e) is None]
    if missing:
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as requirements:
            for e in missing:
                requirements.write(f"{e['name']}=={e['version']} --hash=sha256:{e['sha256']}\n")
        print(f"packages: downloading {', '.join(e['name'] for e in missing)}", file=sys.stderr)
        done = subprocess.run(pip_download(args, args.cache) + ["--no-deps", "--require-hashes", "-r", requirements.name])
        os.unlink(requirements.name)
        if done.returncode != 0:
            fail("could not download the wheels above with the lock file's hashes "
                 "(a wheel missing from PyPI, no network, or a hash that does not match)")
    wheels = []
    for e in entries:
        path = wheel_in(args.cache, e)
        if path is None:
            fail(f"{e['name']} {e['version']}: no wheel was downloaded")
        if not re.search(r"-py3(\.[^-]*)?-none-any\.whl$|-py2\.py3-none-any\.whl$", path):
            fail(f"{e['name']} {e['version']}: {os.path.basename(path)} is not a pure-Python py3-none-any wheel")
        got = sha256(path)
        if got != e["sha256"]:
            fail(f"{e['name']} {e['version']}: {os.path.basename(path)} has sha256 {got}, "
                 f"but the lock file says {e['sha256']}; refusing it")
        wheels.append(path)
    # One zip of every wheel's files; a wheel's .data/purelib goes to the top.
    seen = set()
    with zipfile.ZipFile(args.out, "w", zipfile.ZIP_DEFLATED) as out:
        for path in wheels:
            with zipfile.ZipFile(path) as wheel:
                for info in wheel.infolist():
                    name = re.sub(r"^[^/]+\.data/purelib/", "", info.filename)
                    if ".data/" in name.split("/", 1)[0] + "/" or info.is_dir() or name in seen:
                        continue
                    seen.add(name)
                    out.writestr(name, wheel.read(info.filename))
        # zipimport finds no namespace package (a directory of modules
        # without __init__.py, as micropip's `_vendored`): each gets an
        # empty one, which makes it a regular package.
        for name in sorted(seen):
            if not name.endswith(".py") or ".dist-info/" in name:
                continue
            parts = name.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                init = "/".join(parts[:depth]) + "/__init__.py"
                if init not in seen:
                    seen.add(init)
                    out.writestr(init, b"")
    listing = [{"name": e["name"], "version": e["version"]} for e in entries]
    with open(os.path.join(os.path.dirname(os.path.abspath(args.out)), "packages.json"), "w") as f:
        json.dump(listing, f, indent=1)
        f.write("\n")


def lock(args):
    with tempfile.TemporaryDirectory() as directory:
        done = subprocess.run(pip_download(args, directory) + args.packages)
        if done.returncode != 0:
            fail("could not resolve those packages to pure-Python wheels")
        for file in sorted(os.listdir(directory)):
            name, version = file.split("-")[:2]
            print(f"{name.replace('_', '-').lower()} {version} {sha256(os.path.join(directory, file))}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    fetch_parser = commands.add_parser("fetch")
    fetch_parser.add_argument("--lock", required=True)
    fetch_parser.add_argument("--cache", required=True)
    fetch_parser.add_argument("--out", required=True)
    fetch_parser.add_argument("--python-version", required=True)
    lock_parser = commands.add_parser("lock")
    lock_parser.add_argument("--python-version", required=True)
    lock_parser.add_argument("packages", nargs="+")
    args = parser.parse_args()
    fetch(args) if args.command == "fetch" else lock(args)


if __name__ == "__main__":
    main()
