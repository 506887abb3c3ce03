"""A small leader-elected controller whose reconciles can misbehave on request, for the supervision
cluster test.

``python -m tests.runtime.supervision_app --kubeconfig K --namespace NS --lease NAME --identity ID`` runs
the real runtime (Manager, LeaderElector, an Informer, a Controller with one worker) over the
ConfigMaps labelled ``supervision=source`` in ``NS``. A reconcile writes ``<name>-seen`` (label
``supervision=seen``, ``data.attempts`` = how often the key was reconciled), unless the source asks
otherwise through ``data.misbehave``:

* ``foreign-cancel`` — on the first attempt, await a future someone else cancelled (the shape of the
  issue-17 bug: the ``CancelledError`` is not the worker's own); the key must be retried and reconciled;
* ``cancel-worker`` — cancel the worker task itself (a bug that really ends the only worker): the
  Manager must notice that the worker pool ended while leading and exit non-zero.

Exit code: the Manager's.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
from typing import Any, Final

from gpustack_worker.cli.process import running
from gpustack_worker.runtime.controller import Controller, Result
from gpustack_worker.runtime.informer import Informer
from gpustack_worker.runtime.leader import LeaderElector
from gpustack_worker.runtime.manager import Manager
from gpustack_worker.runtime.queue import WorkQueue
from gpustack_worker.runtime.resources import CONFIG_MAP

LABEL: Final = "supervision"
CONTROLLER: Final = "supervision"
FIELD_MANAGER: Final = "supervision-app"


def seen(source: Any, attempts: int) -> dict[str, Any]:
    meta = source["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{meta['name']}-seen",
            "namespace": meta["namespace"],
            "labels": {LABEL: "seen"},
        },
        "data": {"attempts": str(attempts)},
    }


async def main(args: argparse.Namespace) -> int:
    async with running(args.kubeconfig, user_agent=f"supervision-app/{args.identity}") as proc:
        client = proc.client
        sources = Informer(client, CONFIG_MAP, namespace=args.namespace, label_selector=f"{LABEL}=source")
        attempts: collections.Counter[str] = collections.Counter()

        async def reconcile(key: str) -> Result:
            source = sources.store.get(key)
            if source is None:
                return Result.done()
            attempts[key] += 1
            misbehave = (source.get("data") or {}).get("misbehave")
            if misbehave == "foreign-cancel" and attempts[key] == 1:
                shared = asyncio.get_running_loop().create_future()
                shared.cancel()
                await shared
            if misbehave == "cancel-worker":
                task = asyncio.current_task()
                assert task is not None
                task.cancel()
                await asyncio.sleep(0)
            await client.apply(CONFIG_MAP, seen(source, attempts[key]), field_manager=FIELD_MANAGER)
            return Result.done()

        controller = Controller(CONTROLLER, reconcile, WorkQueue(CONTROLLER), workers=1)
        controller.watch(sources)
        elector = LeaderElector(
            client,
            name=args.lease,
            namespace=args.namespace,
            identity=args.identity,
            lease_duration=8.0,
            renew_deadline=5.0,
            retry_period=1.0,
        )
        manager = Manager(elector=elector, health_bind=args.metrics_bind)
        manager.add_informer(sources)
        manager.add_controller(controller)
        return await manager.run(proc.stop)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="supervision_app")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--lease", required=True)
    parser.add_argument("--identity", required=True)
    parser.add_argument("--metrics-bind", default="127.0.0.1:0")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
