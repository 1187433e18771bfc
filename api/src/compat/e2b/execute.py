# The helper of the E2B-compatible API in a Python context, run once as
# the first exec of the context's runbox session (see interpreter.rs). It
# puts `__runbox_e2b` among the builtins, out of the code's globals. Each
# `run_code` is then an exec, `await __runbox_e2b()`, with the request as
# JSON on its stdin:
#
#   {"source": s, "cell": n, "marker": m, "env": {name: value}}
#
# The source runs in the session's `__main__`, so its names last into the
# next call, as in a notebook: the value of a last bare expression is
# shown, and an exception is caught and described. What is shown is
# printed after the code's own output as one line: the marker, then JSON,
# which the api cuts from the stream. Code that replaces the helper or
# forges a marker changes only its own answers.


def __runbox_e2b_install():
    import builtins

    async def run():
        import ast
        import inspect
        import json
        import linecache
        import os
        import sys
        import traceback

        request = json.loads(sys.stdin.read())
        source = request["source"]
        name = f"<cell-{request['cell']}>"
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
        namespace = sys.modules["__main__"].__dict__
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        shown = {"text": None, "error": None}
        saved_env = {key: os.environ.get(key) for key in request.get("env") or {}}
        os.environ.update(request.get("env") or {})

        async def evaluate(code):
            result = eval(code, namespace)
            if code.co_flags & inspect.CO_COROUTINE:
                result = await result
            return result

        try:
            tree = ast.parse(source, name)
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr) and not source.rstrip().endswith(";"):
                last = ast.Expression(tree.body.pop().value)
            await evaluate(compile(tree, name, "exec", flags=flags, dont_inherit=True))
            if last is not None:
                value = await evaluate(compile(last, name, "eval", flags=flags, dont_inherit=True))
                if value is not None:
                    # As E2B shows it: a string's repr without its quotes.
                    shown["text"] = value if isinstance(value, str) else repr(value)
        except BaseException as e:
            # Only the cell's frames are shown: this function's own are dropped.
            tb = None if isinstance(e, SyntaxError) else e.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename != name:
                tb = tb.tb_next
            shown["error"] = {
                "name": type(e).__name__,
                "value": str(e),
                "traceback": "".join(traceback.format_exception(type(e), e, tb)),
            }
        finally:
            for key, value in saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout.write("\n" + request["marker"] + json.dumps(shown) + "\n")
        sys.stdout.flush()


    builtins.__runbox_e2b = run


__runbox_e2b_install()
del __runbox_e2b_install
