"""Sessions: tests, lint, typecheck, crds, rbac, webhooks, kueue_config, settings_doc, demo, bench.

``nox -s lint typecheck tests`` is CI.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True


@nox.session
def tests(session: nox.Session) -> None:
    """Unit, table and end-to-end tests; the e2e tests run on a real local control plane."""
    session.install("-e", ".[test]")
    # Build (or reuse from the cache) the pinned control-plane binaries first, so that a component that
    # cannot be built fails the run up front with go's own error instead of inside a fixture.
    session.run("python", "-m", "gpustack_worker.devcluster.build")
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over the package."""
    session.install("-e", ".[dev,test]")
    session.run("mypy", "gpustack_worker")


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
    session.run("python", "-m", "gpustack_worker.cli.settingsdoc", "docs/settings.md")


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: a dev cluster, a simulated mixed GPU cluster and the node agent labelling it."""
    session.install("-e", ".")
    session.run("gpustack-worker", "demo", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks: print measured numbers and ratios from one run (never pass/fail)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "gpustack_worker.devcluster.build")
    for script in ("bench/runtime_bench.py", "bench/agent_bench.py", "bench/chain_bench.py"):
        session.run("python", script, *session.posargs)
