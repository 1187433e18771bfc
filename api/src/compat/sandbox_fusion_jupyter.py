# One step of a SandboxFusion `run_jupyter` request, run as an exec of the
# request's own runbox Python session (see sandbox_fusion.rs). The api sends
# this file as the exec's code and the step as JSON on its stdin:
#
#   {"op": "put", "files": {path: base64}}   write the request's files
#   {"op": "cell", "index": n, "source": s, "marker": m}
#                                            run one cell as a notebook does
#   {"op": "fetch", "paths": [path], "marker": m}
#                                            read back the files asked for
#
# A cell runs in the session's `__main__`, so its names last into the next
# cell. What a notebook shows besides the cell's output (the value of its
# last expression, its exception) is printed after that output as one line:
# the marker, then JSON. The api cuts stdout at the marker's last
# occurrence. A cell that forges a marker changes only its own answer.


async def __runbox_jupyter_step():
    import ast
    import base64
    import inspect
    import json
    import linecache
    import os
    import sys
    import traceback

    # This function's name leaves the notebook's globals before any cell runs.
    globals().pop("__runbox_jupyter_step", None)
    step = json.loads(sys.stdin.read())
    out = sys.stdout

    def report(value):
        out.flush()
        sys.stderr.flush()
        out.write("\n" + step["marker"] + json.dumps(value) + "\n")
        out.flush()

    if step["op"] == "put":
        for path, content in step["files"].items():
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            with open(path, "wb") as f:
                f.write(base64.b64decode(content))
        return

    if step["op"] == "fetch":
        found = {}
        for path in step["paths"]:
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    found[path] = base64.b64encode(f.read()).decode("ascii")
        report({"files": found})
        return

    source = step["source"]
    name = f"<cell-{step['index']}>"
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    namespace = sys.modules["__main__"].__dict__
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    display, error = [], []

    async def evaluate(code):
        result = eval(code, namespace)
        if code.co_flags & inspect.CO_COROUTINE:
            result = await result
        return result

    try:
        tree = ast.parse(source, name)
        last = None
        # As a notebook: the value of a last bare expression is shown, unless
        # the cell ends in a semicolon.
        if tree.body and isinstance(tree.body[-1], ast.Expr) and not source.rstrip().endswith(";"):
            last = ast.Expression(tree.body.pop().value)
        await evaluate(compile(tree, name, "exec", flags=flags, dont_inherit=True))
        if last is not None:
            value = await evaluate(compile(last, name, "eval", flags=flags, dont_inherit=True))
            if value is not None:
                display.append({"text/plain": repr(value)})
    except BaseException as e:
        # Only the cell's frames are shown (a SyntaxError has none): this
        # step's own come first, and are dropped.
        tb = None if isinstance(e, SyntaxError) else e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != name:
            tb = tb.tb_next
        error.append({
            "ename": type(e).__name__,
            "evalue": str(e),
            "traceback": traceback.format_exception(type(e), e, tb),
        })
    report({"display": display, "error": error})


await __runbox_jupyter_step()
