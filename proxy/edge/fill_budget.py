"""The bytes fills hold while they read bodies whole (issue 32 §2, decision 0046).

A fill reads a storable body whole, up to ``Filler.whole_max``, before it is stored and
answered (edge/fill.py): that memory is held whatever its client reads. ``FillBudget`` bounds
it per process (edge.fill_buffer_total_bytes); a fill that would pass it keeps nothing more:
its answer is relayed at the client's pace (edge/forward.py ``relay``), or streamed into the
shared tier, and ``refused`` counts it. ``_Held`` is one fill's share, given back when the
fill is over (once its answer is built: a relayed prefix counts until it is sent).

``AnswerCollector`` shows it in /metrics, with the compression queue (edge/compress.py):
``fill_buffer_bytes``, ``fill_buffer_max_bytes``, ``fills_over_budget_total``,
``compress_queue_bytes``, ``compress_queue_max_bytes`` and ``compress_refused_total``, this
process's (a node with workers does not merge them yet).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import Metric

from proxy.edge.compress import Compressions
from proxy.edge.origin import OriginResponse
from proxy.observe.worker_edge import answer_metrics


class FillBudget:
    """The bytes the fills of one process hold while they read bodies whole, against
    ``limit`` (edge.fill_buffer_total_bytes, decision 0046): a body read whole stays in memory
    until it is stored and answered, whatever its client reads. A fill that would pass the
    limit keeps nothing: its answer is relayed (or streamed into the shared tier), at the
    client's pace. ``refused`` counts those."""

    __slots__ = ("held", "limit", "refused")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.refused = 0

    @property
    def free(self) -> int:
        return max(0, self.limit - self.held)


class Held:
    """What one fill took of the budget; given back when the fill is over."""

    __slots__ = ("_budget", "size")

    def __init__(self, budget: FillBudget) -> None:
        self._budget = budget
        self.size = 0

    async def read_whole(
        self, origin: OriginResponse, limit: int, progress: Callable[[], None] | None = None
    ) -> tuple[bytes, bool, bool]:
        """Read the body until it ends or passes ``limit`` or the budget: the bytes read,
        whether it ended, and whether the budget stopped it."""
        budget = self._budget
        length = origin.content_length
        if length is not None and length <= limit and length > budget.free:
            budget.refused += 1
            return b"", False, True
        parts: list[bytes] = []
        size = 0
        while True:
            chunk = await origin.read_chunk()
            if not chunk:
                return b"".join(parts), True, False
            if progress is not None:
                progress()
            parts.append(chunk)
            size += len(chunk)
            budget.held += len(chunk)
            self.size += len(chunk)
            if size > limit:
                return b"".join(parts), False, False
            if budget.held > budget.limit:
                budget.refused += 1
                return b"".join(parts), False, True

    def give_back(self) -> None:
        self._budget.held -= self.size
        self.size = 0


class AnswerCollector:
    """This process's budgets for answers, as Prometheus samples read at scrape time
    (decision 0046): the fill budget and the compression queue, each held, its limit and
    what it refused."""

    def __init__(
        self,
        budget: FillBudget,
        compressions: Compressions,
        prefix: str,
        lane: Callable[[], int] = lambda: 0,
    ) -> None:
        self._budget = budget
        self._compressions = compressions
        self._prefix = prefix
        self._lane = lane  # the hit lane's answers (decision 0050): a plain int, read here

    def figures(self) -> list[int]:
        """fill held, fill budget, fills over budget, compression queued, its bound, and
        refused, and the hit lane's answers: an edge worker's report (decision 0051;
        ``answer_metrics`` reads them)."""
        budget, queue = self._budget, self._compressions
        held = [budget.held, budget.limit, budget.refused]
        return [*held, queue.pending, queue.max_bytes, queue.refused, self._lane()]

    def collect(self) -> Iterable[Metric]:
        return answer_metrics(self.figures(), self._prefix)
