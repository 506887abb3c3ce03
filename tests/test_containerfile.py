"""The image installs only from its hash-pinned locks, runs as non-root, and the locks match pyproject.

No container engine here, so the Containerfile is checked as text: every ``pip install`` takes a lock with
``--require-hashes`` (or is our own wheel, ``--no-deps --no-index``), nothing else installs software, the
base image is pinned, the final ``USER`` is a non-root numeric id, and the locks' Python is the image's.

Drift (pyproject changed, ``nox -s lock`` not run) is caught offline, so CI never depends on the index:
each lock records a fingerprint of the requirement list it was resolved from (the formula is the one in
noxfile.py ``_write_locks``), and independently every requirement must be pinned at a version its
specifier admits, the lock's direct pins must be exactly pyproject's requirements, every pin has hashes
and is reachable from them. A full re-resolution against the index is ``nox -s lock_check``.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_LOCK = "requirements.lock"
BUILD_LOCK = "requirements-build.lock"
LOCKS = (RUNTIME_LOCK, BUILD_LOCK)
#: The image's machines; a requirement whose marker holds on either must be in the lock.
MACHINES = ("x86_64", "aarch64")
OTHER_INSTALLERS = {"apt-get", "apt", "apk", "dnf", "yum", "microdnf", "curl", "wget", "uv", "pipx", "conda"}
INDEX_OPTIONS = ("-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--trusted-host", "-e")


# --- the Containerfile ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass
class Stage:
    image: str
    name: str | None
    line: int
    instructions: list[Instruction] = field(default_factory=list)


def parse_containerfile(text: str) -> list[Stage]:
    """Instructions (continuation lines joined, comments dropped) grouped by ``FROM``."""
    stages: list[Stage] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if not pending:
            start = number
        pending.append(stripped.removesuffix("\\").strip())
        if stripped.endswith("\\"):
            continue
        keyword, _, args = " ".join(pending).partition(" ")
        pending = []
        instruction = Instruction(keyword.upper(), args.strip(), start)
        if instruction.keyword == "FROM":
            words = instruction.args.split()
            words = [w for w in words if not w.startswith("--platform")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name, start))
        elif stages:
            stages[-1].instructions.append(instruction)
    return stages


def image_python(image: str) -> str | None:
    """``3.11.14`` for ``docker.io/library/python:3.11.14-slim-trixie[@sha256:...]``."""
    match = re.search(r"(?:^|/)python:(\d+\.\d+\.\d+)(?:[-@]|$)", image)
    return match.group(1) if match else None


def _pinned(image: str) -> bool:
    if re.search(r"@sha256:[0-9a-f]{64}$", image):
        return True
    tag = image.rsplit("/", 1)[-1].partition(":")[2]
    return bool(re.fullmatch(r"\d+\.\d+\.\d+(-[a-z0-9.-]+)?", tag))


def _shell_commands(script: str) -> list[list[str]]:
    commands: list[list[str]] = []
    for part in re.split(r"&&|\|\||;|\|", script):
        words = shlex.split(part)
        if words:
            commands.append(words)
    return commands


def _pip_call(words: list[str]) -> list[str] | None:
    """The arguments after ``pip`` for ``pip ...``, ``pip3 ...`` or ``python -m pip ...``; else None."""
    if Path(words[0]).name in ("pip", "pip3"):
        return words[1:]
    if Path(words[0]).name.startswith("python") and words[1:3] == ["-m", "pip"]:
        return words[3:]
    return None


def _pip_problems(args: list[str], copied: str, where: str) -> tuple[list[str], list[str]]:
    """Problems with one pip call, and the lock files it installs."""
    subcommand = next((a for a in args if not a.startswith("-")), "")
    rest = args[args.index(subcommand) + 1 :] if subcommand else []
    options = {a.split("=", 1)[0] for a in rest if a.startswith("-")}
    flags = set(rest)
    problems = [
        f"{where}: pip {subcommand} with {option} (installs must come from the locks)"
        for option in INDEX_OPTIONS
        if option in options or option in flags
    ]
    if subcommand == "download":
        problems.append(f"{where}: pip download fetches unpinned files")
    if subcommand == "wheel":
        missing = {"--no-deps", "--no-build-isolation", "--no-index"} - flags
        if missing:
            problems.append(f"{where}: pip wheel without {sorted(missing)} resolves from the index")
    if subcommand != "install":
        return problems, []
    locks: list[str] = []
    positional: list[str] = []
    skip = False
    for index, arg in enumerate(rest):
        if skip:
            skip = False
        elif arg in ("-r", "--requirement"):
            locks.append(rest[index + 1] if index + 1 < len(rest) else "")
            skip = True
        elif arg.startswith("--requirement="):
            locks.append(arg.partition("=")[2])
        elif not arg.startswith("-"):
            positional.append(arg)
    if locks:
        missing = {"--require-hashes", "--no-deps", "--only-binary=:all:"} - flags
        if missing:
            problems.append(f"{where}: pip install -r without {sorted(missing)}")
        for lock in locks:
            if Path(lock).name not in LOCKS:
                problems.append(f"{where}: pip install -r {lock} is not one of the locks {LOCKS}")
            elif Path(lock).name not in copied:
                problems.append(f"{where}: {lock} is installed but never copied into this stage")
    if positional:
        wheels = all(p.startswith("/") and p.endswith(".whl") for p in positional)
        if not wheels or not {"--no-deps", "--no-index"} <= flags:
            problems.append(
                f"{where}: pip install {' '.join(positional)} is unpinned "
                "(only a lock with --require-hashes, or our own built wheel with --no-deps --no-index)"
            )
    if not locks and not positional:
        problems.append(f"{where}: pip install of nothing recognisable: {shlex.join(args)}")
    return problems, [Path(lock).name for lock in locks]


def containerfile_problems(text: str) -> list[str]:
    stages = parse_containerfile(text)
    if not stages:
        return ["no FROM"]
    problems: list[str] = []
    names: set[str] = set()
    for stage in stages:
        if stage.image not in names and not _pinned(stage.image):
            problems.append(
                f"line {stage.line}: base image {stage.image} is not pinned (digest or exact X.Y.Z tag)"
            )
        if stage.name:
            names.add(stage.name)
        copied = ""
        installed: list[str] = []
        for instruction in stage.instructions:
            where = f"line {instruction.line}"
            if instruction.keyword == "ADD" and re.search(r"\bhttps?://", instruction.args):
                problems.append(f"{where}: ADD from a URL is an unpinned download")
            if instruction.keyword == "COPY":
                copied += " " + instruction.args
            if instruction.keyword != "RUN":
                continue
            for words in _shell_commands(instruction.args):
                if Path(words[0]).name in OTHER_INSTALLERS:
                    problems.append(f"{where}: {words[0]} installs or fetches outside the locks")
                pip = _pip_call(words)
                if pip is None:
                    continue
                found, locks = _pip_problems(pip, copied, where)
                problems += found
                installed += locks
                if "wheel" in pip and "--no-build-isolation" in pip and BUILD_LOCK not in installed:
                    problems.append(
                        f"{where}: pip wheel --no-build-isolation before {BUILD_LOCK} is installed"
                    )
    final = stages[-1]
    final_installs = [
        i.args
        for i in final.instructions
        if i.keyword == "RUN" and re.search(rf"-r\s+\S*{RUNTIME_LOCK}", i.args)
    ]
    if not final_installs:
        problems.append(f"the final stage does not install {RUNTIME_LOCK}")
    users = [i for i in final.instructions if i.keyword == "USER"]
    if not users:
        problems.append("the final stage has no USER: the image would run as root")
    else:
        user = users[-1].args
        if not re.fullmatch(r"\d+(:\d+)?", user):
            problems.append(f"USER {user} is not a numeric uid[:gid] (runAsNonRoot cannot verify a name)")
        elif 0 in {int(part) for part in user.split(":")}:
            problems.append(f"USER {user} is root")
    return problems


# --- the locks -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    hashes: tuple[str, ...]
    via: tuple[str, ...]


@dataclass(frozen=True)
class Lock:
    header: tuple[str, ...]
    pins: dict[str, Pin]
    problems: tuple[str, ...]


def parse_lock(text: str) -> Lock:
    """A ``uv pip compile --generate-hashes`` requirements file: header comments, pins, ``# via`` lines."""
    header: list[str] = []
    entries: list[tuple[str, str, list[str], list[str]]] = []
    problems: list[str] = []
    logical: list[str] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index].strip()
        index += 1
        if line.startswith("#"):
            comment = line.lstrip("#").strip()
            if not entries:
                header.append(comment)
            elif comment.startswith("via "):
                entries[-1][3].append(comment.removeprefix("via ").strip())
            elif comment != "via" and lines[index - 2].strip().startswith("#"):
                entries[-1][3].append(comment)
            continue
        if not line:
            continue
        logical = [line.removesuffix("\\").strip()]
        while line.endswith("\\") and index < len(lines) and not lines[index].strip().startswith("#"):
            line = lines[index].strip()
            index += 1
            logical.append(line.removesuffix("\\").strip())
        words = " ".join(logical).split()
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", words[0])
        if not match:
            problems.append(f"not an exact pin: {words[0]}")
            continue
        hashes = [w.removeprefix("--hash=") for w in words[1:] if w.startswith("--hash=")]
        others = [w for w in words[1:] if not w.startswith("--hash=")]
        if others:
            problems.append(f"{words[0]}: unexpected {others}")
        entries.append((canonicalize_name(match.group(1)), match.group(2), hashes, []))
    pins = {name: Pin(name, version, tuple(hashes), tuple(via)) for name, version, hashes, via in entries}
    return Lock(tuple(header), pins, tuple(problems))


def input_fingerprint(requirements: list[str]) -> str:
    """The same formula as noxfile.py ``_write_locks``: sha256 of the requirement strings, one per line."""
    return hashlib.sha256("\n".join(requirements).encode()).hexdigest()


def _applies(requirement: Requirement, python: str) -> bool:
    if requirement.marker is None:
        return True
    for machine in MACHINES:
        env = default_environment()
        env.update(
            python_version=".".join(python.split(".")[:2]),
            python_full_version=python,
            sys_platform="linux",
            platform_system="Linux",
            os_name="posix",
            platform_machine=machine,
            implementation_name="cpython",
            platform_python_implementation="CPython",
        )
        if requirement.marker.evaluate(dict(env)):
            return True
    return False


def lock_python(lock: Lock) -> str | None:
    match = re.search(r"--python-version (\S+)", " ".join(lock.header))
    return match.group(1) if match else None


def lock_problems(lock: Lock, requirements: list[str], project: str | None) -> list[str]:
    """What is wrong with ``lock`` as the resolution of ``requirements``.

    ``project`` is uv's annotation for pyproject's own requirements (``gpustack-worker (pyproject.toml)``);
    None for a lock written without annotations, where the dependency graph cannot be checked.
    """
    problems = list(lock.problems)
    recorded = re.search(r"input-sha256: ([0-9a-f]{64})", " ".join(lock.header))
    if recorded is None or recorded.group(1) != input_fingerprint(requirements):
        problems.append("the requirements changed since the lock was written: run `nox -s lock`")
    python = lock_python(lock)
    if python is None:
        return [*problems, "the lock does not say which Python it was resolved for (--python-version)"]
    for pin in lock.pins.values():
        if not pin.hashes:
            problems.append(f"{pin.name}=={pin.version} has no hashes")
        problems += [
            f"{pin.name}: bad hash {h}" for h in pin.hashes if not re.fullmatch(r"sha256:[0-9a-f]{64}", h)
        ]
    direct: set[str] = set()
    for text in requirements:
        requirement = Requirement(text)
        if not _applies(requirement, python):
            continue
        name = canonicalize_name(requirement.name)
        direct.add(name)
        pin = lock.pins.get(name)
        if pin is None:
            problems.append(f"{text}: not in the lock")
        elif not requirement.specifier.contains(pin.version, prereleases=True):
            problems.append(f"{text}: the lock pins {pin.version}")
    if project is None:
        return problems
    annotated = {name for name, pin in lock.pins.items() if project in pin.via}
    for name in sorted(annotated - direct):
        problems.append(f"{name} is pinned as a direct requirement that pyproject no longer has")
    for pin in lock.pins.values():
        if not pin.via:
            problems.append(f"{pin.name} is pinned but nothing requires it")
        for parent in pin.via:
            if parent != project and canonicalize_name(parent) not in lock.pins:
                problems.append(f"{pin.name} is required by {parent}, which is not in the lock")
    return problems


# --- the repository's files ------------------------------------------------------------------------------


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _inputs() -> dict[str, tuple[list[str], str | None]]:
    data = _pyproject()
    project = data["project"]
    build = data["build-system"]
    assert isinstance(project, dict) and isinstance(build, dict)
    return {
        RUNTIME_LOCK: (list(project["dependencies"]), f"{project['name']} (pyproject.toml)"),
        BUILD_LOCK: (list(build["requires"]), None),
    }


def _lock(name: str) -> Lock:
    return parse_lock((ROOT / name).read_text())


def _containerfile() -> str:
    return (ROOT / "Containerfile").read_text()


@pytest.mark.parametrize("name", LOCKS)
def test_lock_matches_pyproject(name: str) -> None:
    requirements, project = _inputs()[name]
    lock = _lock(name)
    assert len(lock.pins) >= len(requirements)
    assert lock_problems(lock, requirements, project) == []


def test_runtime_lock_is_the_whole_dependency_graph() -> None:
    lock = _lock(RUNTIME_LOCK)
    # The compiled dependencies the image needs a wheel for on both machines are pinned with several hashes.
    for name in ("pydantic-core", "orjson", "cryptography", "cffi", "pyyaml"):
        assert len(lock.pins[name].hashes) >= len(MACHINES), name
    assert {"kr8s", "httpx-ws", "python-box", "typing-extensions"} <= set(lock.pins)


def test_containerfile_installs_only_from_the_locks() -> None:
    assert containerfile_problems(_containerfile()) == []


def test_locks_are_resolved_for_the_image_python() -> None:
    stages = parse_containerfile(_containerfile())
    python = image_python(stages[-1].image)
    assert python is not None, stages[-1].image
    assert {name: lock_python(_lock(name)) for name in LOCKS} == dict.fromkeys(LOCKS, python)
    assert {image_python(stage.image) for stage in stages} == {python}  # the wheel is built where it runs


# The checks above would pass vacuously if they could not see a defect: each case breaks the real file.
CONTAINERFILE_DEFECTS = {
    "unpinned package": (
        ("ENTRYPOINT", "RUN python -m pip install requests\nENTRYPOINT"),
        "pip install requests is unpinned",
    ),
    "lock without hashes": (
        (
            "--require-hashes --no-deps --only-binary=:all: -r /tmp/requirements.lock",
            "-r /tmp/requirements.lock",
        ),
        "pip install -r without",
    ),
    "not a lock": (("-r /tmp/requirements.lock", "-r /tmp/requirements.txt"), "is not one of the locks"),
    "extra index": (
        ("--no-deps --no-index /wheels", "--no-deps --extra-index-url=http://x /wheels"),
        "--extra",
    ),
    "own wheel with deps": (("--no-deps --no-index /wheels", "--no-index /wheels"), "is unpinned"),
    "wheel from the index": (
        ("--no-build-isolation --no-index", "--no-build-isolation"),
        "pip wheel without",
    ),
    "apt": (("ENTRYPOINT", "RUN apt-get update && apt-get install -y curl\nENTRYPOINT"), "apt-get installs"),
    "floating base": (("python:3.11.14-slim-trixie AS build", "python:3.11-slim AS build"), "is not pinned"),
    "latest base": (
        ("FROM docker.io/library/python:3.11.14-slim-trixie\n", "FROM python:latest\n"),
        "not pinned",
    ),
    "root user": (("USER 65532:65532", "USER 0"), "USER 0 is root"),
    "named user": (("USER 65532:65532", "USER worker"), "not a numeric uid"),
    "no user": (("USER 65532:65532\n", ""), "no USER"),
    "lock not copied": (("COPY requirements.lock /tmp/requirements.lock\n", ""), "never copied"),
    "runtime lock skipped": (
        (
            "python -m pip install --require-hashes --no-deps --only-binary=:all: "
            "-r /tmp/requirements.lock \\\n    && rm /tmp/requirements.lock",
            "true",
        ),
        "does not install requirements.lock",
    ),
}


@pytest.mark.parametrize("case", sorted(CONTAINERFILE_DEFECTS))
def test_containerfile_defects_are_found(case: str) -> None:
    (old, new), expected = CONTAINERFILE_DEFECTS[case]
    text = _containerfile()
    assert old in text, f"the case no longer matches the Containerfile: {old!r}"
    problems = containerfile_problems(text.replace(old, new, 1))
    assert any(expected in p for p in problems), problems


def _drop_pin(text: str, name: str) -> str:
    return re.sub(rf"(?ms)^{re.escape(name)}==.*?(?=^[a-z])", "", text, count=1)


LOCK_DEFECTS = {
    "a requirement added": (lambda t: t, ["rich>=13"], ["rich>=13: not in the lock", "run `nox -s lock`"]),
    "a floor raised past the pin": (lambda t: t, ["anyio>=99"], ["anyio>=99: the lock pins"]),
    "a requirement removed": (lambda t: t, ["-tenacity"], ["tenacity is pinned as a direct requirement"]),
    "a pin dropped": (lambda t: _drop_pin(t, "orjson"), [], ["orjson>=3.9: not in the lock"]),
    "a parent dropped": (lambda t: _drop_pin(t, "httpx-ws"), [], ["required by httpx-ws, which is not"]),
    "hashes dropped": (
        lambda t: re.sub(r"(?m)^(orjson==\S+) \\\n(    --hash=\S+( \\)?\n)+", r"\1\n", t),
        [],
        ["orjson==3.13.0 has no hashes"],
    ),
    "a range instead of a pin": (lambda t: t.replace("orjson==", "orjson>=", 1), [], ["not an exact pin"]),
}


@pytest.mark.parametrize("case", sorted(LOCK_DEFECTS))
def test_lock_defects_are_found(case: str) -> None:
    mutate, change, expected = LOCK_DEFECTS[case]
    requirements, project = _inputs()[RUNTIME_LOCK]
    for item in change:
        if item.startswith("-"):
            requirements = [r for r in requirements if not r.startswith(item[1:])]
        else:
            requirements = [*requirements, item]
    problems = lock_problems(parse_lock(mutate((ROOT / RUNTIME_LOCK).read_text())), requirements, project)
    for text in expected:
        assert any(text in p for p in problems), (text, problems)
