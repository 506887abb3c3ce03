"""The runtime every controller in the project runs on (no imports from the rest of the package).

kr8s provides authentication and HTTP; informer, cache, workqueue, server-side apply, leader election
and settings are ours (kr8s has none of them, and its watch does not survive a 410 or a silent stream
end). Public surface, one module per idea:

* :class:`~.client.Client` (``client.py``) — ``connect``, ``list`` (all pages, returns the list RV),
  ``watch`` (raw events, bookmarks, ``ERROR`` raised as :class:`~.client.ApiError`:
  :class:`~.client.NotFound` 404, :class:`~.client.Conflict` 409, :class:`~.client.Gone` 410), ``get``,
  ``create``, ``apply`` (SSA), ``patch``, ``replace``, ``delete`` (preconditions), ``close``;
  ``requests_by_method`` / ``writes`` count requests for tests; ``fence`` (a :class:`~.client.WriteFence`)
  refuses writes with :class:`~.client.Fenced` when closed, ``with_fence`` makes a view with another.
* :class:`~.informer.Informer` (``informer.py``) — list-then-watch of one kind with label/field selectors,
  ``add_handler(fn(event, old, new))``, ``wait_synced()``, ``store``.
* :class:`~.store.Store` (``store.py``) — ``get(key)``, ``list()``, ``keys()``, ``by_index(name, value)``;
  objects are immutable :class:`~.frozen.FrozenDict` projections made by ``transform.make_transform``
  (keeps only our field managers' managedFields entries; drops ``status.images`` …).
* indexers (``indexers.py``) — the :data:`~.indexers.IndexFunc` shape and the generic indexes
  (namespace, owner uid, ``by_label(key)``); controller packages declare theirs in one module each.
* :class:`~.queue.WorkQueue` (``queue.py``) — dedup, one worker per key, ``add``/``add_after``/
  ``add_rate_limited``/``forget``/``shutdown``/``drain``; rate limiters in ``ratelimit.py``; the
  injectable :class:`~.clock.Clock` (``FakeClock`` for tests).
* :class:`~.controller.Controller` and :class:`~.controller.Result` (``controller.py``) — N workers,
  ``watch(informer, mapper=, predicates=, delay=)`` (``delay`` coalesces an event burst into one
  reconcile via ``add_after``), predicates ``generation_changed``, ``labels_changed``,
  ``semantic_changed(view)``.
* :class:`~.apply.Applier` (``apply.py``) — SSA as one field manager with the exact client-side no-op
  check ``is_noop`` (zero writes at steady state; field sets and values as the server merges them, from
  the kind's :class:`~.resources.FieldHints`), bound to the informer(s) it checks against;
  ``apply_status`` via ``/status``; ``delete`` with the UID precondition and a propagation policy.
* :class:`~.manager.Manager` (``manager.py``) — starts informers, waits for sync, runs controllers
  (under a :class:`~.leader.LeaderElector` when given), serves ``/healthz`` ``/readyz`` ``/metrics``.
  The elector fences the client it is given: writes pass only while leading and the Lease is provably
  ours (docs/runtime.md, "Fencing"); a lost Lease cancels in-flight reconciles, a stop drains while
  renewing.
* :class:`~.settings.SettingsSource` (``settings.py``) — the live settings ConfigMap validated into one
  composed settings model (each stage's :class:`~.settings.SettingsModel`; the runtime's own tunables
  are :class:`~.settings.RuntimeSettings`); ``source.current`` is the last good snapshot; fields marked
  ``STARTUP_ONLY`` are read from the environment at start-up and rejected in the ConfigMap.
* :class:`~.registry.InformerRegistry` (``registry.py``) — one shared informer per (kind, namespace,
  selectors): ``informer(..., field_manager=, indexers=)`` and ``await synced(...)`` (handed out after its
  first LIST); every informer of a kind keeps every registered manager's managedFields;
  ``Manager.add_registry`` runs it.
* mappers (``mappers.py``) — ``own_key``, ``by_owner``, ``by_index`` (another store's index),
  ``to_keys`` (one kind to another), ``all_keys``, ``merge``: the ``mapper=`` of ``Controller.watch``.
* pruning (``prune.py``) — ``stamp(body, controller)`` puts the owner label (``OWNER_LABEL``) on what a
  controller creates; :class:`~.prune.Pruner` deletes the stamped objects ``desired()`` no longer
  produces (UID precondition), never anything else.
* :class:`~.finalizers.Finalizer` (``finalizers.py``) — compare-and-swap add/remove of one finalizer,
  the pure ``lifecycle(obj, finalizer)``, ``handle(obj, cleanup)`` for reconciles on ``deletionTimestamp``.
* conditions (``conditions.py``) — ``Condition`` and ``for_apply``/``merge``: ``lastTransitionTime``
  kept unless the status flips, so a converged status apply is a no-op; time passed in.
* :class:`~.events.EventRecorder` (``events.py``) — ``events.k8s.io/v1`` Events de-duplicated into
  series (one write per series per window); ``warning``/``normal`` never raise.
* ``quantity.py`` — Kubernetes quantities by value: ``parse``, ``same_quantity``, ``ceil_quantity``.
* ``telemetry.py`` (structlog JSON, OTLP when ``OTEL_*`` say so), ``metrics.py`` (conventional names).

Wiring a controller::

    client = await Client.connect(kubeconfig)
    settings = SettingsSource(client, model=MySettings, name=..., namespace=...)
    nodes = Informer(client, NODE, field_selector=f"metadata.name={node}",
                     transform=make_transform([FIELD_MANAGER]), indexers={...})
    applier = Applier(client, FIELD_MANAGER, cache=nodes)   # refuses a cache that drops its managedFields

    async def reconcile(key: str) -> Result:
        desired = desired_for(nodes.store.get(key), settings.current)   # pure
        await applier.apply(KIND, desired, cache_of_target.get(target_key))
        return Result.done()

    ctl = Controller("my-controller", reconcile, WorkQueue("my-controller"),
                     workers=settings.current.controller_workers)
    ctl.watch(nodes, predicates=[labels_changed])
    manager = Manager(settings=settings, health_bind="127.0.0.1:8080")   # + elector=LeaderElector(...)
    manager.add_informer(nodes); manager.add_controller(ctl)
    exit_code = await manager.run(stop_event)
"""
