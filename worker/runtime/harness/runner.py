# The runner every Python job goes through, inside the job's Worker (see
# python-job.mjs): it compiles the program, runs it as `__main__`, prints an
# uncaught exception as CPython does, and returns the exit status. The
# status has MEMORY_FLAG added when the program ended on a MemoryError.
#
# Everything it uses is bound when `make_runner` is defined, so a program
# that replaces a builtin or a module changes its own run only.
#
# The harness runs this file with two globals of its own: PACKAGES_ZIP,
# where the runtime's packages are (see pyodide.mjs), and MEMORY_FLAG.
import ast, builtins, linecache, os, random, sys, traceback, types

# Pyodide records the path of the script that booted it; not the program's business.
os.environ.pop("_", None)
# The memory snapshot froze one generator state; every child starts from fresh entropy.
random.seed()
# The runtime's packages (already there when the snapshot was built with them).
if os.path.exists(PACKAGES_ZIP) and PACKAGES_ZIP not in sys.path:
    sys.path.insert(0, PACKAGES_ZIP)

def make_runner(
    compile=compile, eval=eval, isinstance=isinstance, type=type, int=int, print=print,
    BaseException=BaseException, SystemExit=SystemExit, MemoryError=MemoryError,
    SyntaxError=SyntaxError, ModuleType=types.ModuleType, sys=sys, modules=sys.modules,
    print_exception=traceback.print_exception, line_cache=linecache.cache,
    builtins=builtins, list=list, flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, memory_flag=MEMORY_FLAG,
):
    def exit_status(code):
        if code is None:
            return 0
        if isinstance(code, int):
            return int(code) & 0xFF
        print(code, file=sys.stderr)
        return 1

    async def run(main, source, name):
        line_cache[name] = (len(source), None, source.splitlines(True), name)
        status = 0
        try:
            code = compile(source, name, "exec", flags=flags, dont_inherit=True)
            result = eval(code, main.__dict__)
            if code.co_flags & 0x80:  # CO_COROUTINE: the program used top-level await
                await result
        except SystemExit as e:
            status = exit_status(e.code)
        except BaseException as e:
            # Drop this runner's frame; a SyntaxError has no program frames at all.
            tb = None if isinstance(e, SyntaxError) else e.__traceback__.tb_next
            try:
                print_exception(type(e), e, tb)
            except BaseException:
                pass
            status = 1 | (memory_flag if isinstance(e, MemoryError) else 0)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        return status

    def new_main():
        main = ModuleType("__main__")
        main.__file__ = "main.py"
        main.__builtins__ = builtins
        modules["__main__"] = main
        return main

    async def run_main(source, args):
        sys.argv = ["main.py", *list(args)]
        return await run(new_main(), source, "main.py")

    async def run_in_session(source, name):
        # A session's programs share one __main__, made by its first exec
        # and carried by its checkpoints.
        main = modules.get("__main__")
        if getattr(main, "__file__", None) != "main.py":
            main = new_main()
        sys.argv = ["main.py"]
        return await run(main, source, name)

    return run_main, run_in_session

run_main, run_in_session = make_runner()
