"""Sessions: tests, tests_thorough, lint, typecheck, crds, rbac, webhooks, kueue_config, settings_doc, demo,
bench, mutations, image, http_deps, lock, lock_check.

``nox -s lint typecheck tests`` is CI.
"""

from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

#: The CI sessions' virtualenvs are made and filled by uv when it is installed (``.ci/run`` installs it
#: beside nox), else by venv and pip: a venv and ``pip install -e '.[test]'`` took 20 s per session,
#: uv 2 s. The other sessions keep venv and pip (``lock_check`` installs the image's way, with pip).
_CI_BACKEND = "uv|venv"


@nox.session(venv_backend=_CI_BACKEND)
def tests(session: nox.Session) -> None:
    """Unit, table and end-to-end tests; the e2e tests run on a real local control plane."""
    _suite(session)


@nox.session(venv_backend=_CI_BACKEND)
def tests_thorough(session: nox.Session) -> None:
    """The tests with hypothesis' ``thorough`` profile: every property test at its full example count
    (tests/kit/properties.py); ``tests`` runs the ``ci`` profile. Failing examples are kept in
    ``.hypothesis/`` and replayed first by later runs of either session."""
    _suite(session, "--hypothesis-profile=thorough")


def _suite(session: nox.Session, *options: str) -> None:
    session.install("-e", ".[test]")
    # Build (or reuse from the cache) the pinned control-plane binaries first, so that a component that
    # cannot be built fails the run up front with go's own error instead of inside a fixture; helm (the
    # chart tests) and Jaeger (the trace and demo tests) are optional for the demo, not for the tests.
    session.run("python", "-m", "gpustack_worker.devcluster.build", *_OPTIONAL_FOR_TESTS)
    # The real nodes' runtime (Debian's containerd, runc, CNI plugins, iptables). The product image is
    # built by the first test that needs it (devcluster.image.ensure_product_image, under a lock): here it
    # held up the whole run for 14 s after every package change, there it overlaps the other workers.
    session.run("python", "-m", "gpustack_worker.devcluster.debs")
    session.run("pytest", *_parallel(session.posargs), *options, *session.posargs, env=_bytecode(session))


def _bytecode(session: nox.Session) -> dict[str, str]:
    """Python's compiled modules kept for the run, in the session's virtualenv (the source tree stays
    clean), whatever ``PYTHONDONTWRITEBYTECODE`` says.

    Without them every Python process compiles what it imports from source: each xdist worker rewrote
    and compiled every test module at collection (12.5 s of CPU each, 3.6 s from the cache), and each of
    the hundreds of ``gpustack-worker`` processes the tests start compiled the package again (0.2 s each).
    With a cache prefix the installed libraries' own ``__pycache__`` is not read either: they are
    compiled into it once, by the first process that imports them."""
    location = getattr(session.virtualenv, "location", None)
    if not location:  # no virtualenv of its own (``nox --no-venv``): compiled beside the sources
        return {"PYTHONDONTWRITEBYTECODE": ""}
    return {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": os.path.join(location, "pycache")}


#: The optional components the tests use: helm (the chart tests, and its install onto a real node), Jaeger
#: (the trace and demo tests), and a real node's kubelet, kube-controller-manager, kube-proxy and pause.
_OPTIONAL_FOR_TESTS = tuple(
    arg
    for name in ("helm", "jaeger", "kubelet", "kube-controller-manager", "kube-proxy", "pause")
    for arg in ("--with", name)
)


def _parallel(posargs: list[str]) -> list[str]:
    """pytest-xdist's options for the run: two workers per core, each module whole on one worker
    (``loadfile``: a module's fixtures, its control plane and its resets stay together).

    Each worker has its own session control plane (tests/kit/cluster.py), and a cluster test spends most
    of its time waiting on it (Kueue, the scheduler, a watch), so more workers than cores fill the idle
    CPU. Measured on a 2-core machine, warm, one run each of the whole suite's pytest (4,976 tests):
    serial 21 min 32 s, 2 workers 11 min 44 s, 3 workers 9 min 32 s, 4 workers 8 min 9 s (docs/testing.md).
    ``-n`` in the arguments (``-n 0``: serial) replaces this; so does GPUSTACK_TEST_WORKERS."""
    if any(arg.startswith(("-n", "--numprocesses")) for arg in posargs):
        return []
    workers = os.environ.get("GPUSTACK_TEST_WORKERS") or str(2 * (os.cpu_count() or 1))
    return ["-n", workers, "--dist", "loadfile"]


@nox.session
def mutations(session: nox.Session) -> None:
    """Does the suite still catch what it caught? Six small product mutations run against the tests of two
    revisions (bench/mutation_check.py): ``nox -s mutations -- --before REV --work DIR --out FILE``."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "gpustack_worker.devcluster.build")
    session.run("python", "bench/mutation_check.py", *session.posargs)


@nox.session(venv_backend=_CI_BACKEND)
def lint(session: nox.Session) -> None:
    """ruff over the whole tree."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")


@nox.session(venv_backend=_CI_BACKEND)
def typecheck(session: nox.Session) -> None:
    """mypy --strict over the package.

    Its cache lives in the component cache (``mypy/`` beside the built binaries), not in the checkout: a
    fresh clone of a tree mypy has seen re-checks only what changed (mypy compares each file's hash when
    its mtime differs, so a new checkout's timestamps cost nothing). A new machine starts cold."""
    session.install("-e", ".[dev,test]")
    cache = session.run(
        "python",
        "-c",
        "from gpustack_worker.devcluster.build import cache_dir; print(cache_dir())",
        silent=True,
    )
    session.run("mypy", "--cache-dir", os.path.join(str(cache).strip(), "mypy"), "gpustack_worker")


@nox.session
def crds(session: nox.Session) -> None:
    """Regenerate manifests/crds/ from the pydantic models."""
    session.install("-e", ".")
    session.run("python", "-m", "gpustack_worker.api.crdgen", "manifests/crds")


@nox.session
def rbac(session: nox.Session) -> None:
    """Regenerate manifests/rbac/ and chart/templates/rbac-*.yaml from gpustack_worker/api/rbac.py."""
    session.install("-e", ".")
    session.run("python", "-m", "gpustack_worker.api.rbacgen")


@nox.session
def webhooks(session: nox.Session) -> None:
    """Regenerate chart/templates/webhook-{validating,mutating}.yaml from gpustack_worker/api/webhooks.py."""
    session.install("-e", ".")
    session.run("python", "-m", "gpustack_worker.api.webhookgen")


@nox.session
def kueue_config(session: nox.Session) -> None:
    """Regenerate chart/files/kueue-manager-config.yaml from gpustack_worker/api/kueue_config.py."""
    session.install("-e", ".")
    session.run("python", "-m", "gpustack_worker.api.kueue_config", "chart/files/kueue-manager-config.yaml")


@nox.session
def settings_doc(session: nox.Session) -> None:
    """Regenerate docs/settings.md (the settings reference) from the settings models."""
    session.install("-e", ".")
    session.run("python", "-m", "gpustack_worker.cli.settingsdoc.render", "docs/settings.md")


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: a dev cluster, a simulated mixed GPU cluster and the node agent labelling it."""
    session.install("-e", ".")
    session.run("gpustack-worker", "demo", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks: every figure from one run per size, then one table per bench with the growth 1k → 20k
    (never pass/fail). ``nox -s bench -- --sizes 1000,5000`` sets every bench's sizes, ``--sizes
    chain=1000,5000`` one bench's, ``--only chain,simulate`` picks benches, ``--out DIR`` keeps the JSON,
    ``--quiet 600`` is chain_bench's idle soak; defaults in bench/summary.py (SIZES)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "gpustack_worker.devcluster.build")
    session.run("python", "bench/summary.py", "run", *session.posargs)


@nox.session
def image(session: nox.Session) -> None:
    """The product image from the Containerfile's recipe, built here without a registry (docs/image.md):
    a Debian bookworm base from mmdebstrap, the hash-pinned locks and our wheel; prints the OCI layout
    tar's path, the image name (the chart's ``localhost/gpustack-worker:<version>``) and its size. Root."""
    session.install("-e", ".")
    session.run("python", "-m", "gpustack_worker.devcluster.image")


# The two ends of the httpx/httpcore range pyproject.toml allows (keep them equal to its bounds: the
# lowest and the highest releases inside them); `http_deps` runs the runtime tests on each.
HTTP_DEPS = {
    "lowest": ("httpx==0.25.1", "httpcore==1.0.4"),
    "highest": ("httpx==0.29.0", "httpcore==1.0.9"),
}
# The runtime's cluster tests that exercise the HTTP session (fence, keep-alive, transport, proxies).
HTTP_CLUSTER_TESTS = (
    "tests/runtime/test_leader_fencing_cluster.py",
    "tests/runtime/test_leader_stall_cluster.py",
    "tests/runtime/test_transport_cluster.py",
    "tests/runtime/test_proxy_cluster.py",
)


@nox.session
@nox.parametrize("end", list(HTTP_DEPS))
def http_deps(session: nox.Session, end: str) -> None:
    """The runtime tests (non-cluster, and the HTTP session's cluster tests) on the lowest and on the
    highest httpx/httpcore pyproject.toml allows (`nox -s http_deps`), and the linear pool pass's
    equivalence test on every httpcore release it is listed for (pool.LINEAR_POOL_HTTPCORE)."""
    session.install("-e", ".[test]")
    session.install(*HTTP_DEPS[end])
    session.run(
        "python",
        "-c",
        "import httpx, httpcore; print('httpx', httpx.__version__, 'httpcore', httpcore.__version__)",
    )
    session.run("python", "-m", "gpustack_worker.devcluster.build")
    session.run("pytest", "-q", "-m", "not cluster", "tests/runtime", *session.posargs)
    session.run("pytest", "-q", *HTTP_CLUSTER_TESTS, *session.posargs)
    if end == "highest":
        # The linear pool pass is used on the httpcore releases it is listed for: each one passes the
        # equivalence test against its own pass.
        listed = session.run(
            "python",
            "-c",
            "from gpustack_worker.runtime.pool import LINEAR_POOL_HTTPCORE as v; print(*sorted(v))",
            silent=True,
        )
        for version in str(listed).split():
            session.install(f"httpcore=={version}")
            session.run("pytest", "-q", "tests/runtime/test_pool.py")
        session.install(*HTTP_DEPS[end])


# The image's locks: the Containerfile installs only from these files (pip --require-hashes), and
# tests/test_containerfile.py (run by `tests`, so by CI, offline) fails when pyproject's requirements
# change without `nox -s lock`. LOCK_PYTHON is the Containerfile's base image interpreter (the test checks
# they agree). The lock is resolved for linux x86_64 and re-resolved for aarch64, which must give the same
# pins; each pin carries the hashes of every file of its release, so both architectures install from it.
LOCK_UV = "uv==0.13.8"
LOCK_PYTHON = "3.11.14"
LOCK_PLATFORMS = ("x86_64-manylinux_2_28", "aarch64-manylinux_2_28")
LOCK_HEADER = """\
# The image's pinned requirements with hashes; regenerate with `nox -s lock`, never edit by hand.
#    uv pip compile --generate-hashes --python-version {python} --python-platform {platforms} (same pins)
# input-sha256: {fingerprint}  (pyproject.toml {origin})
"""


def _write_locks(session: nox.Session, outdir: str) -> None:
    import hashlib
    import pathlib
    import tomllib

    pyproject = tomllib.loads(pathlib.Path("pyproject.toml").read_text())
    tmp = pathlib.Path(session.create_tmp())
    build_in = tmp / "build-requires.in"
    # name: (requirements, where they come from, uv's input, extra uv flags)
    inputs = {
        "requirements.lock": (
            pyproject["project"]["dependencies"],
            "[project].dependencies",
            "pyproject.toml",
            [],
        ),
        # --no-annotate: the input is a temporary file whose path would show in the annotations.
        "requirements-build.lock": (
            pyproject["build-system"]["requires"],
            "[build-system].requires",
            str(build_in),
            ["--no-annotate"],
        ),
    }
    build_in.write_text("".join(r + "\n" for r in pyproject["build-system"]["requires"]))
    for name, (requirements, origin, source, flags) in inputs.items():
        bodies = []
        for platform in LOCK_PLATFORMS:
            out = tmp / f"{name}.{platform}"
            pins = ["--generate-hashes", "--python-version", LOCK_PYTHON, "--python-platform", platform]
            session.run("uv", "pip", "compile", source, *pins, *flags, "--no-header", "-q", "-o", str(out))
            bodies.append(out.read_text())
        if len(set(bodies)) != 1:
            session.error(f"{name}: the pins differ between {LOCK_PLATFORMS}; the image needs one lock")
        # The fingerprint formula is repeated in tests/test_containerfile.py (input_fingerprint).
        fingerprint = hashlib.sha256("\n".join(requirements).encode()).hexdigest()
        platforms = " / ".join(LOCK_PLATFORMS)
        header = LOCK_HEADER.format(
            python=LOCK_PYTHON, platforms=platforms, fingerprint=fingerprint, origin=origin
        )
        (pathlib.Path(outdir) / name).write_text(header + bodies[0])


@nox.session
def lock(session: nox.Session) -> None:
    """Regenerate requirements.lock and requirements-build.lock (the image's pins, with hashes)."""
    session.install(LOCK_UV)
    _write_locks(session, ".")


@nox.session
def lock_check(session: nox.Session) -> None:
    """Needs the package index: re-resolve the locks and compare, install the image's way, `pip check`."""
    import filecmp
    import pathlib

    session.install(LOCK_UV)
    fresh = pathlib.Path(session.create_tmp()) / "fresh"
    fresh.mkdir(exist_ok=True)
    _write_locks(session, str(fresh))
    for name in ("requirements.lock", "requirements-build.lock"):
        if not filecmp.cmp(name, fresh / name, shallow=False):
            session.error(f"{name} is stale: a fresh resolution differs (run `nox -s lock`)")
    pip = ("python", "-m", "pip")
    binary = ("--require-hashes", "--no-deps", "--only-binary=:all:")
    # Each pin has a hashed wheel for both of the image's machines (there is no compiler in the image).
    abi = ("--implementation=cp", "--abi=cp311", "--abi=abi3", "--abi=none", "--python-version", LOCK_PYTHON)
    manylinux = ("manylinux_2_28", "manylinux_2_17", "manylinux2014")
    for machine in ("x86_64", "aarch64"):
        tags = [f"--platform={tag}_{machine}" for tag in manylinux]
        wheels = str(pathlib.Path(session.create_tmp()) / f"wheels-{machine}")
        session.run(*pip, "download", "-q", *binary, *tags, *abi, "-r", "requirements.lock", "-d", wheels)
    # Then the Containerfile's steps: build lock, runtime lock, our package without isolation or index.
    session.run(*pip, "install", "-q", *binary, "-r", "requirements-build.lock")
    session.run(*pip, "install", "-q", *binary, "-r", "requirements.lock")
    session.run(*pip, "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", ".")
    session.run(*pip, "check")
    session.run("gpustack-worker", "--help", silent=True)
