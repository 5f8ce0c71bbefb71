"""The fleet: many edge processes kept in step through Valkey (docs/decisions/0014).

- ``settings``: FleetSettings, the ``[fleet]`` section.
- ``scripts``: the only code that talks to Valkey, through the Lua scripts of ``lua``.
- ``lua``: the Lua scripts (``.lua`` files), and the names of their keys and arguments.
- ``member``: an edge process's side (sync, renew, apply, ack, the lease deadline).
- ``store``: the member's Store, which serves from cache only before that deadline.
- ``purger``: the control plane's side (clear, then wait until the 200 is true).
- ``figures``: the control plane's copy of every edge process's report (FleetFigures), for
  /metrics, the dashboard and its Nodes page.

The rules themselves are pure, in ``proxy.core.lease``.
"""
