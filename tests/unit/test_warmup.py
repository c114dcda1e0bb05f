"""The daemon imports the exact plan's solver at start, not in the first reconcile of a burst."""

from __future__ import annotations

import subprocess
import sys

from autoscaler.runtime.warmup import SOLVER_MODULES, warm_up


def test_exact_plans_on_import_the_solver_before_any_reconcile() -> None:
    script = (
        "import sys\n"
        "from autoscaler.runtime.warmup import warm_up\n"
        "warm_up(True).join(60)\n"
        f"print(all(m in sys.modules for m in {SOLVER_MODULES!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_exact_plans_off_import_nothing() -> None:
    assert warm_up(False) is None


def test_the_modules_warmed_up_are_those_the_exact_step_and_its_solver_import() -> None:
    import ast
    import inspect

    from autoscaler.core.planning import exact_model, exact_step

    imported = set()
    for source in (inspect.getsource(exact_step), inspect.getsource(exact_model.run)):
        for statement in ast.walk(ast.parse(inspect.cleandoc(source))):
            if isinstance(statement, ast.ImportFrom) and statement.module:
                imported |= {f"{statement.module}.{alias.name}" for alias in statement.names}
    assert set(SOLVER_MODULES) <= imported
