"""fca_adapter.audit and fca_adapter.exec on a HookedAdapter in this process, as the docs show them;
then a failure of each.

    api_checks.py audit|exec DATA_DIR OUT_DIR      (fca from $FCA_BIN)

Prints one line per check, "ok ..." or "FAILED ...", and exits 1 on any failure.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fca_adapter  # noqa: E402
import exec_models  # noqa: E402
import hooked_models  # noqa: E402

command, data, out = sys.argv[1], sys.argv[2], sys.argv[3]
failures = []


def check(what, ok):
    print(("ok " if ok else "FAILED ") + what)
    if not ok:
        failures.append(what)


def refused(run, flag):
    try:
        run()
        check(f"a bad {flag} raises AuditError", False)
    except fca_adapter.AuditError as e:
        check(f"a bad {flag} raises AuditError with fca's message", flag in str(e))


if command == "audit":
    adapter = hooked_models.adapter("moe")
    result = fca_adapter.audit(adapter, data=data, out=out, eval_windows=8, calib_windows=8, reps=2, bootstrap=50,
                               no_progress=True)
    check("audit returns audit.json", result["schema"] == "fca-audit-v1" and os.path.isfile(os.path.join(out, "audit.json")))
    check("exact replay and the sensitivity probe passed", result["exact_replay"]["passed"] and result["replay_sensitivity"]["passed"])
    check("0 controller evaluations in every replay", all(c["controller_evaluations"] == 0 for c in result["conditions"]))
    check("the model stayed in this process", result["provenance"]["adapter_command"].startswith("cat "))
    check("the model is named by its class, not by the relay command", result["model"]["path"] == "external: MoeStyle")
    refused(lambda: fca_adapter.audit(adapter, data=data, out=out + "-bad", eval_windows=1), "--eval-windows")
else:
    adapter = exec_models.adapter("routed")
    result = fca_adapter.exec(adapter, data=data, out=out, runs=2, max_runs=2, warmup=0, eval_windows=8, calib_windows=8,
                              no_progress=True)
    model = result["models"][0]
    check("exec returns exec.json", result["schema"] == "fca-exec-v2" and os.path.isfile(os.path.join(out, "exec.json")))
    check("the model stayed in this process", model["adapter_command"].startswith("cat ") and model["family"] == "external")
    check("the model is named by its class, not by the relay command",
          model["path"] == "external: " + type(adapter.model).__name__)
    check("live, replay and static_profile were measured", [m["mode"] for m in model["modes"]] == ["live", "replay", "static_profile"])
    check("the experts ran on 2 of 4 rows per token and layer", model["modes"][0]["executed_units_per_token"]["experts"] == 6)
    check("0 controller evaluations in replay", model["modes"][1]["controller_evaluations_per_pass"] == 0)
    refused(lambda: fca_adapter.exec(adapter, data=data, out=out + "-bad", runs=0), "--runs")
    # An MoE against a Dense reference, which has no experts: counted as 0 for it, with the reason.
    moe = exec_models.adapter("routed", reference="dense")
    result = fca_adapter.exec(moe, data=data, out=out + "-dense", runs=2, max_runs=2, warmup=0, eval_windows=8, calib_windows=8,
                              no_progress=True)
    # An error after the adapter described itself names it, never the relay fca_adapter.exec runs.
    broken = exec_models.adapter("inexact")
    try:
        fca_adapter.exec(broken, data=data, out=out + "-inexact", runs=2, max_runs=2, warmup=0, eval_windows=8, calib_windows=8,
                         no_progress=True)
        check("an inexact replay raises AuditError", False)
    except fca_adapter.AuditError as e:
        check("an error names the adapter, not the relay", "adapter 'MoeStyle'" in str(e) and "cat <&" not in str(e))
    # An adapter whose describe fails: fca can name only its command, the relay; the API names the adapter.
    class Undescribable(exec_models.fca_adapter.Adapter):
        def describe(self):
            raise RuntimeError("no description")
    try:
        fca_adapter.exec(Undescribable(), data=data, out=out + "-undescribable", runs=2, no_progress=True)
        check("a failing describe raises AuditError", False)
    except fca_adapter.AuditError as e:
        check("a failing describe names the adapter, not the relay", "adapter 'Undescribable'" in str(e) and "cat <&" not in str(e))
    reference = result["models"][0]["modes"][-1]
    check("an MoE against a Dense reference: the reference's experts count 0, with the reason",
          reference["mode"] == "reference" and reference["executed_units_per_token"]["experts"] == 0 and
          "has no module matching" in reference["absent_units"]["experts"])
print("FAILED: " + ", ".join(failures) if failures else "all checks passed")
sys.exit(1 if failures else 0)
