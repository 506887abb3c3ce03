"""Bad settings input, against the model every process validates with: each case gets its exact signal —
one log line, one Warning Event on the ConfigMap, ``gpustack_settings_invalid_total`` + 1, the errors
naming the key (or variable), the value and the rule — and the settings in force stay the last good
ones. The same rejected content seen again (a resync, an annotation edit) is not reported again."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, cast

import pytest
from prometheus_client import REGISTRY

from gpustack_worker.cli.settings import WorkerSettings, environment_problem
from gpustack_worker.runtime import settings as settings_module
from gpustack_worker.runtime.resources import EVENT
from gpustack_worker.runtime.settings import SettingsError, SettingsSource

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.resources import Resource

NS = "gpustack-system"
GOOD = {"node-management-manual": "true", "log-level": "DEBUG", "fit-label-coalesce-seconds": "1.5"}


class _EventSink:
    """The client as far as a SettingsSource uses it outside its informer: Event creates."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    async def create(self, resource: Resource, body: dict[str, Any], namespace: str | None = None) -> Any:
        assert resource is EVENT and namespace == NS
        self.events.append(body)
        return body


class _LogRecorder:
    """Stands in for the module's structlog logger: records (level, event, fields)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        def log(event: str, **fields: Any) -> None:
            self.lines.append((level, event, fields))

        return log


def _configmap(data: dict[str, str], rv: str = "1", **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "cm", "namespace": NS, "uid": "u-1", "resourceVersion": rv},
        "data": data,
        **extra,
    }


def _invalid_total(name: str) -> float:
    return REGISTRY.get_sample_value("gpustack_settings_invalid_total", {"configmap": f"{NS}/{name}"}) or 0.0


STARTUP = "start-up-only setting, read once when the process starts; set {} on the workload instead"

#: (ConfigMap data, exact errors). Every case is rejected as a whole revision.
BAD_CONFIGMAPS: list[tuple[str, dict[str, str], list[str]]] = [
    (
        "typo",
        {"node-managment-manual": "false"},
        ["node-managment-manual='false': unknown setting, did you mean node-management-manual?"],
    ),
    (
        "env-style-key",
        {"GPUSTACK_WORKLOAD_FIT_AFFINITY": "false"},
        ["GPUSTACK_WORKLOAD_FIT_AFFINITY='false': unknown setting, did you mean workload-fit-affinity?"],
    ),
    (
        "snake-case-key",
        {"log_level": "INFO"},
        ["log_level='INFO': unknown setting, did you mean log-level?"],
    ),
    ("unknown-key", {"colour": "blue"}, ["colour='blue': unknown setting"]),
    (
        "startup-only-workers",
        {"controller-workers": "4"},
        ["controller-workers='4': " + STARTUP.format("GPUSTACK_CONTROLLER_WORKERS")],
    ),
    (
        "startup-only-cross-field-pair",
        {"watch-timeout-min-seconds": "700", "watch-timeout-max-seconds": "600"},
        [
            "watch-timeout-max-seconds='600': " + STARTUP.format("GPUSTACK_WATCH_TIMEOUT_MAX_SECONDS"),
            "watch-timeout-min-seconds='700': " + STARTUP.format("GPUSTACK_WATCH_TIMEOUT_MIN_SECONDS"),
        ],
    ),
    (
        "startup-only-leader",
        {"leader-lease-seconds": "30"},
        ["leader-lease-seconds='30': " + STARTUP.format("GPUSTACK_LEADER_LEASE_SECONDS")],
    ),
    (
        "not-a-bool",
        {"workload-fit-affinity": "maybe"},
        ["workload-fit-affinity='maybe' is invalid: expected true or false"],
    ),
    (
        "inner-whitespace",
        {"node-management-manual": "tr ue"},
        ["node-management-manual='tr ue' is invalid: expected true or false"],
    ),
    (
        "empty-value",
        {"log-level": ""},
        [
            "log-level='': empty value; expected one of DEBUG, INFO, WARNING, ERROR "
            "(remove the key to use the default)"
        ],
    ),
    (
        "whitespace-only",
        {"instance-type-mixed-on-node": " \n "},
        [
            "instance-type-mixed-on-node=' \\n ': empty value; expected true or false "
            "(remove the key to use the default)"
        ],
    ),
    (
        "unknown-mode",
        {"model-artifact-delivery-mode": "Carrier-Pigeon"},
        ["model-artifact-delivery-mode='Carrier-Pigeon' is invalid: expected one of Engine, Node"],
    ),
    (
        "below-range",
        {"fit-label-coalesce-seconds": "-1"},
        ["fit-label-coalesce-seconds='-1' is invalid: expected a number from 0 to 300"],
    ),
    (
        "above-range",
        {"fit-label-coalesce-seconds": "301"},
        ["fit-label-coalesce-seconds='301' is invalid: expected a number from 0 to 300"],
    ),
    (
        "not-a-number",
        {"fit-label-coalesce-seconds": "3s"},
        ["fit-label-coalesce-seconds='3s' is invalid: expected a number from 0 to 300"],
    ),
    (
        "nan",
        {"fit-label-coalesce-seconds": "nan"},
        ["fit-label-coalesce-seconds='nan' is invalid: expected a number from 0 to 300"],
    ),
    (
        "overflow-to-infinity",
        {"fit-label-coalesce-seconds": "1e400"},
        ["fit-label-coalesce-seconds='1e400' is invalid: expected a number from 0 to 300"],
    ),
    (
        "log-level-unknown",
        {"log-level": "verbose"},
        ["log-level='verbose' is invalid: expected one of DEBUG, INFO, WARNING, ERROR"],
    ),
    (
        "long-value-cut",
        {"x" * 80: "y" * 80},
        [f"{'x' * 64}…='{'y' * 64}…': unknown setting"],
    ),
    (
        "valid-half-does-not-apply",
        {"workload-fit-affinity": "false", "node-management-manual": "yes please"},
        ["node-management-manual='yes please' is invalid: expected true or false"],
    ),
]


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> _LogRecorder:
    recorder = _LogRecorder()
    monkeypatch.setattr(settings_module, "_log", recorder)
    return recorder


@pytest.mark.parametrize(
    ("data", "errors"), [c[1:] for c in BAD_CONFIGMAPS], ids=[c[0] for c in BAD_CONFIGMAPS]
)
async def test_bad_configmap_is_rejected_with_one_signal_and_last_good_stays(
    data: dict[str, str], errors: list[str], log: _LogRecorder
) -> None:
    sink = _EventSink()
    name = f"bad-{uuid.uuid4().hex[:8]}"
    source = SettingsSource(cast("Client", sink), model=WorkerSettings, name=name, namespace=NS, env={})
    assert source.load(_configmap(GOOD)) is True
    good = source.current
    assert (good.node_management_manual, good.log_level, good.fit_label_coalesce_seconds) == (
        True,
        "DEBUG",
        1.5,
    )
    before = _invalid_total(name)
    log.lines.clear()

    assert source.load(_configmap(data, rv="2")) is False
    await source.settle()

    assert source.current is good  # the last good snapshot stays, valid keys of the bad revision included
    assert source.last_error is not None and source.last_error.errors == errors
    assert source.rejections == 1
    assert _invalid_total(name) == before + 1
    assert log.lines == [
        (
            "error",
            "invalid settings rejected, the settings in force stay",
            {"configmap": f"{NS}/{name}", "errors": errors},
        )
    ]
    assert len(sink.events) == 1
    event = sink.events[0]
    assert (event["type"], event["reason"], event["action"]) == ("Warning", "InvalidSettings", "LoadSettings")
    assert event["regarding"] == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": name,
        "namespace": NS,
        "uid": "u-1",
        "resourceVersion": "2",
    }
    note = "revision 2 rejected, the settings in force stay: " + "; ".join(errors)
    assert event["note"] == (note if len(note) <= 1024 else note[:1021] + "...")

    # The same content again (a relist, an annotation-only edit): nothing more is reported.
    assert source.load(_configmap(data, rv="3")) is False
    await source.settle()
    assert (source.rejections, len(sink.events), _invalid_total(name)) == (1, 1, before + 1)
    assert source.current is good


async def test_binary_data_is_rejected_too(log: _LogRecorder) -> None:
    sink = _EventSink()
    source = SettingsSource(cast("Client", sink), model=WorkerSettings, name="bin", namespace=NS, env={})
    assert source.load(_configmap({}, binaryData={"log-level": "REVCVUc="})) is False
    await source.settle()
    assert source.last_error is not None
    assert source.last_error.errors == ["log-level: in binaryData; settings are read from data only"]
    assert len(sink.events) == 1


async def test_after_a_fix_the_same_bad_content_is_a_new_incident(log: _LogRecorder) -> None:
    """Rejected, fixed, the same bad value again: reported again in full — log line, metric and a new
    Event (a create, never a series patch: the processes may only create Events in the namespace)."""
    sink = _EventSink()
    source = SettingsSource(cast("Client", sink), model=WorkerSettings, name="fix", namespace=NS, env={})
    assert source.load(_configmap({"log-level": "loud"})) is False
    assert source.load(_configmap({"log-level": "ERROR"}, rv="2")) is True
    assert source.current.log_level == "ERROR" and source.last_error is None
    assert source.load(_configmap({"log-level": "loud"}, rv="3")) is False
    await source.settle()
    errors = [line for line in log.lines if line[0] == "error"]
    assert source.rejections == 2 and len(errors) == 2
    # the fix in between is confirmed by a Normal Event (tests/runtime/test_settings_confirmed.py)
    assert [(e["type"], " ".join(e["note"].split()[:2])) for e in sink.events] == [
        ("Warning", "revision 1"),
        ("Normal", "revision 2"),
        ("Warning", "revision 3"),
    ]
    assert source.recorder is not None and (source.recorder.created, source.recorder.updated) == (3, 0)
    assert source.current.log_level == "ERROR"


async def test_per_node_processes_log_and_count_but_post_no_event(log: _LogRecorder) -> None:
    sink = _EventSink()
    source = SettingsSource(
        cast("Client", sink), model=WorkerSettings, name="quiet", namespace=NS, env={}, post_events=False
    )
    before = _invalid_total("quiet")
    assert source.load(_configmap({"node-managment-manual": "true"})) is False
    await source.settle()
    assert sink.events == [] and _invalid_total("quiet") == before + 1 and len(log.lines) == 1


async def test_deleted_configmap_falls_back_to_env_and_defaults(log: _LogRecorder) -> None:
    sink = _EventSink()
    env = {"GPUSTACK_WORKLOAD_FIT_AFFINITY": "false"}
    source = SettingsSource(cast("Client", sink), model=WorkerSettings, name="del", namespace=NS, env=env)
    assert source.load(_configmap({"workload-fit-affinity": "true"})) is True
    assert source.current.workload_fit_affinity is True
    assert source.load(None) is True
    assert source.current.workload_fit_affinity is False


#: (environment, exact errors): a bad seed fails the source at construction and the command at start.
BAD_ENVIRONMENTS: list[tuple[str, dict[str, str], list[str]]] = [
    (
        "not-an-integer",
        {"GPUSTACK_CONTROLLER_WORKERS": "abc"},
        ["GPUSTACK_CONTROLLER_WORKERS='abc' is invalid: expected an integer from 1 to 64"],
    ),
    (
        "fraction-for-integer",
        {"GPUSTACK_REQUEUE_BURST": "2.5"},
        ["GPUSTACK_REQUEUE_BURST='2.5' is invalid: expected an integer from 1 to 100000"],
    ),
    (
        "empty",
        {"GPUSTACK_NODE_MANAGEMENT_MANUAL": ""},
        [
            "GPUSTACK_NODE_MANAGEMENT_MANUAL='': empty value; expected true or false "
            "(unset the variable to use the default)"
        ],
    ),
    (
        "cross-field-against-default",
        {"GPUSTACK_WATCH_TIMEOUT_MIN_SECONDS": "700"},
        [
            "GPUSTACK_WATCH_TIMEOUT_MIN_SECONDS='700' must not exceed watch-timeout-max-seconds=600 "
            "(default): the watch timeout is drawn between them"
        ],
    ),
    (
        "cross-field-both-set",
        {"GPUSTACK_WATCH_TIMEOUT_MIN_SECONDS": "700", "GPUSTACK_WATCH_TIMEOUT_MAX_SECONDS": "650"},
        [
            "GPUSTACK_WATCH_TIMEOUT_MIN_SECONDS='700' must not exceed "
            "GPUSTACK_WATCH_TIMEOUT_MAX_SECONDS='650': the watch timeout is drawn between them"
        ],
    ),
    (
        "leader-renew-not-below-lease",
        {"GPUSTACK_LEADER_RENEW_DEADLINE_SECONDS": "15"},
        [
            "GPUSTACK_LEADER_RENEW_DEADLINE_SECONDS='15' must be less than leader-lease-seconds=15 "
            "(default): a leader must step down before a standby may take its Lease"
        ],
    ),
    (
        "leader-retry-jitter",
        {"GPUSTACK_LEADER_RETRY_PERIOD_SECONDS": "9"},
        [
            "GPUSTACK_LEADER_RETRY_PERIOD_SECONDS='9' × 1.2 must be less than "
            "leader-renew-deadline-seconds=10 (default): a jittered renewal must fit in the renew deadline, "
            "as client-go requires"
        ],
    ),
    (
        "requeue-base-above-cap",
        {"GPUSTACK_REQUEUE_BASE_DELAY_SECONDS": "60", "GPUSTACK_REQUEUE_MAX_DELAY_SECONDS": "30"},
        [
            "GPUSTACK_REQUEUE_BASE_DELAY_SECONDS='60' must not exceed "
            "GPUSTACK_REQUEUE_MAX_DELAY_SECONDS='30': the first retry delay cannot be above the cap"
        ],
    ),
    (
        "two-problems-one-line",
        {"GPUSTACK_LOG_LEVEL": "chatty", "GPUSTACK_API_TIMEOUT_SECONDS": "0"},
        [
            "GPUSTACK_API_TIMEOUT_SECONDS='0' is invalid: expected a number greater than 0 and at most 600",
            "GPUSTACK_LOG_LEVEL='chatty' is invalid: expected one of DEBUG, INFO, WARNING, ERROR",
        ],
    ),
]


@pytest.mark.parametrize(
    ("env", "errors"), [c[1:] for c in BAD_ENVIRONMENTS], ids=[c[0] for c in BAD_ENVIRONMENTS]
)
async def test_bad_environment_seed_fails_at_start(env: dict[str, str], errors: list[str]) -> None:
    with pytest.raises(SettingsError) as info:
        SettingsSource(cast("Client", _EventSink()), model=WorkerSettings, name="env", namespace=NS, env=env)
    assert info.value.errors == errors
    line = environment_problem(env)
    assert line == "invalid settings in the environment: " + "; ".join(errors)
    assert "\n" not in line
