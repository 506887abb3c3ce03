"""The two AdmissionChecks (never Active on their own)."""

from __future__ import annotations

from gpustack_worker.chain import admissionchecks


def test_both_checks_name_their_controllers() -> None:
    assert {n: b["spec"] for n, b in admissionchecks.desired_admission_checks().items()} == {
        "gpustack-node-devices": {"controllerName": "worker.gpustack.ai/node-devices"},
        "gpustack-model-deployment-joint": {"controllerName": "worker.gpustack.ai/model-deployment-joint"},
    }
    assert all("status" not in b for b in admissionchecks.desired_admission_checks().values())


def test_only_checks_with_a_true_active_condition_count() -> None:
    def check(name: str, status: str | None) -> dict[str, object]:
        conds = [] if status is None else [{"type": "Active", "status": status}]
        return {"metadata": {"name": name}, "status": {"conditions": conds}}

    assert admissionchecks.active_checks(
        [
            check("gpustack-node-devices", None),
            check("gpustack-model-deployment-joint", "True"),
            check("someone-elses", "True"),
        ]
    ) == frozenset({"gpustack-model-deployment-joint"})
    assert admissionchecks.active_checks([check("gpustack-node-devices", "False")]) == frozenset()
