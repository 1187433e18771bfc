#!/usr/bin/env bash
# Black-box checks of a runbox deployment: things that must fail, fail.
#
#   scripts/verify-sandbox.sh URL TOKEN
#
# Prints one line per check ("ok NAME" or "FAIL NAME: why") and exits
# non-zero if any check is wrong. Needs curl and python3.
set -uo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 URL TOKEN" >&2
  exit 2
fi
url=${1%/}
token=$2
failures=0
checks=0

# run LANGUAGE CODE [TIMEOUT_MS] -> prints the job object (waits for it)
run() {
  local body
  body=$(python3 -c 'import json, sys; d = {"language": sys.argv[1], "code": sys.argv[2]}; d.update({"timeout_ms": int(sys.argv[3])} if len(sys.argv) > 3 else {}); print(json.dumps(d))' "$@")
  curl -sS --max-time 90 -X POST "$url/v1/jobs?wait=60" \
    -H "Authorization: Bearer $token" -H 'Content-Type: application/json' --data-binary "$body"
}

# expect NAME JSON PYTHON-PREDICATE: the predicate sees the job as `job`.
expect() {
  local name=$1 json=$2 predicate=$3
  checks=$((checks + 1))
  # The job goes through stdin: a truncated 1 MiB stdout is too long for argv.
  if printf '%s' "$json" | python3 -c 'import json, sys
job = json.load(sys.stdin)
sys.exit(0 if eval(sys.argv[1]) else 1)' "$predicate" 2>/dev/null; then
    echo "ok $name"
  else
    failures=$((failures + 1))
    echo "FAIL $name: expected $predicate, got: ${json:0:400}"
  fi
}

denied='job["status"] == "completed" and job["exit_code"] != 0'

# --- authentication
code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST "$url/v1/jobs" -H 'Content-Type: application/json' -d '{"language":"js","code":"1"}')
expect "no token is refused" "{\"code\": $code}" 'job["code"] == 401'
code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST "$url/v1/jobs" -H "Authorization: Bearer wrong-$token" -H 'Content-Type: application/json' -d '{"language":"js","code":"1"}')
expect "wrong token is refused" "{\"code\": $code}" 'job["code"] == 401'

# --- network
expect "js fetch is denied" "$(run javascript "await fetch('http://127.0.0.1:8080/')")" "$denied and 'net access' in job['stderr']"
expect "js Deno.connect is denied" "$(run javascript "await Deno.connect({ hostname: '1.1.1.1', port: 53 })")" "$denied and 'net access' in job['stderr']"
# A Python job's realm is bare: it has no fetch (nor the AbortController pyfetch makes first).
expect "python pyfetch is denied" "$(run python $'import pyodide.http\nawait pyodide.http.pyfetch("http://127.0.0.1:8080/")')" "$denied and ('net access' in job['stderr'] or 'is not defined' in job['stderr'])"
expect "python socket fails" "$(run python $'import socket\nsocket.create_connection(("1.1.1.1", 53), timeout=3)')" "$denied"

# --- files
expect "js cannot read /etc/passwd" "$(run javascript "console.log(Deno.readTextFileSync('/etc/passwd'))")" "$denied and 'root:' not in job['stdout']"
expect "python cannot read /etc/passwd" "$(run python "print(open('/etc/passwd').read())")" "$denied and 'root:' not in job['stdout']"
expect "js cannot write files" "$(run javascript "Deno.writeTextFileSync('/tmp/runbox-verify', 'x')")" "$denied and 'write access' in job['stderr']"

# A node_modules segment once switched Deno's read check off: a refusal must
# name read access even for a path that does not exist, or (a Python job's
# bare realm) find no module loader at all.
nm_read=$'from pyodide.code import run_js\nprint(await run_js("import(\'file:///runbox-verify/node_modules/x.txt\', { with: { type: \'text\' } }).then(() => \'read\', (e) => String(e))"))'
expect "python cannot read through node_modules" "$(run python "$nm_read")" "job['status'] == 'completed' and ('Requires read access' in job['stdout'] or 'dynamic import callback was not specified' in job['stdout'])"

# --- processes and host
expect "js cannot spawn a process" "$(run javascript "new Deno.Command('/bin/sh', { args: ['-c', 'id'] }).outputSync()")" "$denied and 'run access' in job['stderr']"
# Without Node's child_process in a Python job's bare realm, os.system returns -1.
expect "python os.system runs nothing" "$(run python $'import os\nprint(os.system("id"))')" "'uid=' not in job['stdout'] and ($denied or job['stdout'] == '-1\\n')"
expect "environment is invisible" "$(run javascript "console.log(JSON.stringify(Deno.env.toObject()))")" "$denied and 'env access' in job['stderr']"

# --- code from outside
expect "npm: import is refused" "$(run javascript "await import('npm:left-pad')")" "$denied and '--no-npm' in job['stderr']"
expect "https: import is refused" "$(run javascript "await import('https://esm.sh/left-pad')")" "$denied and 'import access' in job['stderr']"

# --- limits
expect "js endless loop times out" "$(run javascript 'for (;;) {}' 1000)" 'job["status"] == "timeout" and job["exit_code"] is None'
expect "python endless loop times out" "$(run python $'while True:\n    pass' 1000)" 'job["status"] == "timeout"'
expect "runaway output is truncated" "$(run javascript "const s = 'x'.repeat(1 << 20); for (;;) console.log(s)" 3000)" 'job["stdout_truncated"] is True and job["status"] == "timeout"'
expect "js memory bomb is stopped" "$(run javascript 'const a = []; for (;;) a.push(new Array(1e6).fill(1));')" 'job["status"] == "memory_exceeded"'
expect "python memory bomb is stopped" "$(run python $'a = []\nwhile True:\n    a.append(bytearray(10 << 20))')" 'job["status"] == "memory_exceeded"'

# --- statuses are runbox's own
expect "js exit 133 is the program's own" "$(run javascript 'Deno.exit(133)')" 'job["status"] == "completed" and job["exit_code"] == 133'
expect "python exit 389 is the program's own" "$(run python $'import sys\nsys.exit(389)')" 'job["status"] == "completed" and job["exit_code"] == 133'
expect "a thrown out-of-memory error is just an error" "$(run javascript "throw new RangeError('Out of memory')")" 'job["status"] == "completed" and job["exit_code"] == 1'
expect "a self-sent SIGKILL is the program's own" "$(run javascript "Deno.kill(Deno.pid, 'SIGKILL')")" 'job["status"] == "completed" and job["signal"] == 9'

# --- python programs run as the genuine __main__
expect "python unittest.main() runs the tests" "$(run python $'import unittest\nclass T(unittest.TestCase):\n    def test_ok(self):\n        self.assertTrue(True)\nunittest.main()')" 'job["exit_code"] == 0 and "Ran 1 test" in job["stderr"]'
expect "python pickles a class the program defines" "$(run python $'import pickle\nclass P:\n    pass\nprint(type(pickle.loads(pickle.dumps(P()))).__name__)')" 'job["stdout"] == "P\n"'
expect "python cannot patch its way to exit 0" "$(run python $'import __main__, builtins\n__main__.exit_status = lambda code: 0\nbuiltins.isinstance = lambda *a: False\nraise ValueError("still failing")')" 'job["status"] == "completed" and job["exit_code"] == 1'

# --- fresh entropy in every python run
first=$(run python $'import random\nprint(random.random())')
expect "python random numbers differ between runs" "$(run python $'import random\nprint(random.random())')" "job['status'] == 'completed' and job['stdout'] != $(printf '%s' "$first" | python3 -c 'import json, sys; print(repr(json.load(sys.stdin)["stdout"]))')"

# --- no state between runs
run javascript "globalThis.leak = 'x'; console.log(typeof localStorage)" >/dev/null
expect "a global does not survive to the next run" "$(run javascript "console.log(typeof globalThis.leak, typeof localStorage)")" 'job["stdout"] == "undefined undefined\n"'

# --- still healthy
code=$(curl -sS -o /dev/null -w '%{http_code}' "$url/healthz")
expect "service is healthy" "{\"code\": $code}" 'job["code"] == 200'
expect "service still runs code" "$(run python 'print(6 * 7)')" 'job["status"] == "completed" and job["stdout"] == "42\n"'

echo "$((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
