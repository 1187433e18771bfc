"""An agent's workspace through runbox's own API: upload a CSV, analyse it
in two calls that share state, download what the code wrote."""

import os

import httpx

api = httpx.Client(
    base_url=os.environ["RUNBOX_URL"],
    headers={"Authorization": f"Bearer {os.environ['RUNBOX_TOKEN']}"},
    timeout=120,
)
session = api.post("/v1/sessions", json={"language": "python"}).json()["id"]
try:
    sales = "region,amount\nnorth,120\nsouth,80\nnorth,45\n"
    api.put(f"/v1/sessions/{session}/files/data/sales.csv", content=sales).raise_for_status()

    def run(code):
        result = api.post(f"/v1/sessions/{session}/exec", json={"code": code}).json()
        assert result["exit_code"] == 0, result["stderr"]
        return result["stdout"]

    run("import csv\nrows = list(csv.DictReader(open('data/sales.csv')))")
    print(run(
        "totals = {}\n"
        "for row in rows:\n"
        "    totals[row['region']] = totals.get(row['region'], 0) + int(row['amount'])\n"
        "with open('totals.csv', 'w') as out:\n"
        "    out.writelines(f'{k},{v}\\n' for k, v in sorted(totals.items()))\n"
        "print(totals)"
    ), end="")  # {'north': 165, 'south': 80}
    print(api.get(f"/v1/sessions/{session}/files/totals.csv").text, end="")  # north,165 / south,80
finally:
    api.delete(f"/v1/sessions/{session}")
