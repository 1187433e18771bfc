"""The same agent through E2B's own SDK, unchanged: only the environment
points it at runbox."""

import os

os.environ["E2B_API_URL"] = os.environ["E2B_SANDBOX_URL"] = os.environ["RUNBOX_URL"] + "/e2b"
os.environ["E2B_API_KEY"] = os.environ["RUNBOX_TOKEN"]

from e2b_code_interpreter import Sandbox  # noqa: E402

with Sandbox.create() as sandbox:
    sandbox.files.write("data/sales.csv", "region,amount\nnorth,120\nsouth,80\nnorth,45\n")
    sandbox.run_code("import csv\nrows = list(csv.DictReader(open('data/sales.csv')))")
    execution = sandbox.run_code(
        "totals = {}\n"
        "for row in rows:\n"
        "    totals[row['region']] = totals.get(row['region'], 0) + int(row['amount'])\n"
        "with open('totals.csv', 'w') as out:\n"
        "    out.writelines(f'{k},{v}\\n' for k, v in sorted(totals.items()))\n"
        "totals"
    )
    print(execution.text)  # {'north': 165, 'south': 80}
    print(sandbox.files.read("totals.csv"), end="")  # north,165 / south,80
