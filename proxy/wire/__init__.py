"""Every record that crosses a process: its one typed, versioned definition (decision 0027).

Theory of operation. A record leaves one process as text (a Valkey value or pub/sub message, a
line on a pipe, a line of a file) and is read by another, which may run another build: a
fleet runs mixed builds during a rolling upgrade, and a worker restarted after an upgrade is
newer than its node. So each shape has one ``pack_*`` (what the writer sends) and one
``unpack_*`` (what the reader accepts) here, and nowhere else, and each carries a version.

Versions. Version 1 of every record is the bytes the builds before this package wrote, which
carried no tag: an untagged record is version 1, so an old build's records are read, and the
records this build writes are read by old builds. A later version of a text record starts
with a tag ``<family>/<n>`` (no epoch, number or domain name holds a ``/``), and of a JSON
object with the key ``"v"``. A reader accepts the versions it names in ``READS`` and refuses
any other with ``WireError``, as it refuses garbage (not text, not JSON, a field of the
wrong type, a part missing): its message says which record and why, and the reader goes on
without the record, as it did before (a hint that cannot be read means a full sync, a report
that cannot be read is left out of the sums).

The families: ``fleet`` (clear and purge hints, purge records, the figures of acks, dry-run
requests and answers), ``reports`` (a member's info and report), ``worker`` (a worker's
status lines to its node) and ``journal`` (the audit journal's lines). The shapes the rules
decide on are core's frozen dataclasses (``ClearHint``, ``PurgeRecord``, ``PurgeResult``);
the records only of the wire are msgspec ``Struct``s. This package sits above ``proxy.core``
and ``proxy.errors`` and below everything that does I/O.
"""
