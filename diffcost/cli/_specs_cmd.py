"""``diffcost specs``: list built-in chips, systems, models and scenarios."""

from rich.table import Table

from .._analysis.plans import load_scenario, load_spec
from .._inputs.loader import builtin_names
from ._app import app
from ._common import JsonFlag, console, friendly_errors, print_json


@app.command()
@friendly_errors
def specs(
    json_out: JsonFlag = False,
) -> None:
    """List the built-in chips, systems, models and scenarios."""
    catalog: dict[str, list[dict[str, object]]] = {}
    for kind in ("chip", "system", "model"):
        rows = []
        for name in builtin_names(kind):
            spec = load_spec(kind, name)
            row: dict[str, object] = {"name": name, "display_name": spec.info.display_name}
            v = spec.values
            if kind == "chip":
                row["bf16_flop_per_s"] = v["compute"].get(
                    "bf16_flop_per_s", v["compute"].get("fp16_flop_per_s")
                )
                row["memory_capacity_bytes"] = v["memory"]["capacity_bytes"]
                row["memory_bandwidth_bytes_per_s"] = v["memory"]["bandwidth_bytes_per_s"]
            elif kind == "system":
                row["chip"], row["chips"] = v["chip"], v["chips"]
            else:
                row["layers"], row["hidden"] = v["layers"], v["hidden"]
            rows.append(row)
        catalog[kind + "s"] = rows
    catalog["scenarios"] = []
    for name in builtin_names("scenario"):
        sc = load_scenario(name)
        catalog["scenarios"].append(
            {"name": name, "kind": sc.kind, "display_name": sc.display_name}
        )
    if json_out:
        print_json(catalog)
        return
    for kind, rows in catalog.items():
        table = Table(title=kind, title_justify="left")
        table.add_column("name", style="bold")
        table.add_column("description")
        for row in rows:
            table.add_row(str(row["name"]), str(row["display_name"]))
        console.print(table)
