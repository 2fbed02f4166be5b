"""fca_adapter.audit on a HookedAdapter in this process, as the docs show it; then a failure.

    api_audit.py DATA_DIR OUT_DIR      (fca from $FCA_BIN)

Prints one line per check, "ok ..." or "FAILED ...", and exits 1 on any failure.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fca_adapter  # noqa: E402
import hooked_models  # noqa: E402

data, out = sys.argv[1], sys.argv[2]
failures = []


def check(what, ok):
    print(("ok " if ok else "FAILED ") + what)
    if not ok:
        failures.append(what)


adapter = hooked_models.adapter("moe")
result = fca_adapter.audit(adapter, data=data, out=out, eval_windows=8, calib_windows=8, reps=2, bootstrap=50,
                           no_progress=True)
check("audit returns audit.json", result["schema"] == "fca-audit-v1" and os.path.isfile(os.path.join(out, "audit.json")))
check("exact replay and the sensitivity probe passed", result["exact_replay"]["passed"] and result["replay_sensitivity"]["passed"])
check("0 controller evaluations in every replay", all(c["controller_evaluations"] == 0 for c in result["conditions"]))
check("the model stayed in this process", result["model"]["path"].startswith("external: cat "))
try:
    fca_adapter.audit(adapter, data=data, out=out + "-bad", eval_windows=1)
    check("a bad flag raises AuditError", False)
except fca_adapter.AuditError as e:
    check("a bad flag raises AuditError with fca's message", "--eval-windows" in str(e))
print("FAILED: " + ", ".join(failures) if failures else "all checks passed")
sys.exit(1 if failures else 0)
