"""``import diffcost`` imports only what is used (issue 38: ``import
diffcost`` took ~2.1 s on 2 cores importing JAX, Equinox, Optax and pandas up front).  Checked on
``sys.modules`` in a fresh interpreter, never on a clock."""

import json
import os
import subprocess
import sys

import diffcost

HEAVY = ("jax", "pandas", "matplotlib", "transformers", "optax", "equinox")


def _imported_after(code: str) -> dict[str, bool]:
    """Which of :data:`HEAVY` a fresh interpreter has imported after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps({{m: m in sys.modules for m in {HEAVY}}}))"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(out.stdout.splitlines()[-1])


def test_import_diffcost_imports_no_heavy_package():
    assert not any(_imported_after("import diffcost").values())


def test_the_xla_flags_are_set_without_importing_jax():
    from diffcost.testing import CPU_FLAGS, flags_supported

    code = "import os, diffcost; print(os.environ.get('XLA_FLAGS', ''))"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.split() == (list(CPU_FLAGS) if flags_supported() else [])


def test_a_public_name_imports_its_module_on_first_use():
    imported = _imported_after("import diffcost\nassert diffcost.TrainCost.__name__ == 'TrainCost'")
    assert imported["jax"] and imported["equinox"]
    assert not imported["pandas"] and not imported["matplotlib"]


def test_every_public_name_is_listed_and_resolves():
    names = dir(diffcost)
    assert set(diffcost.__all__) <= set(names) and names == sorted(names)
    assert diffcost.TrainCost is diffcost._train.cost.TrainCost  # the defining module's object
    assert isinstance(diffcost.__version__, str)


def test_an_unknown_name_is_an_attribute_error():
    try:
        diffcost.not_a_name  # noqa: B018
    except AttributeError as err:
        assert "not_a_name" in str(err)
    else:
        raise AssertionError("no AttributeError")


def test_a_command_imports_only_its_own_module():
    """``diffcost train`` imports neither the other commands nor pandas (issue 38)."""
    probe = (
        "import json, sys, diffcost.cli\n"
        "sys.argv = ['diffcost', 'train', '--help']\n"
        "try:\n    diffcost.cli.main()\nexcept SystemExit:\n    pass\n"
        "names = ('diffcost.cli._codesign_cmd', 'diffcost.cli._sensitivity_cmd', 'pandas')\n"
        "print(json.dumps([n in sys.modules for n in names]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == [False, False, False]
