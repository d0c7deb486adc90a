"""Connections a server on a network can afford: each request's headers and body must arrive
within a deadline, and when the connections held reach their cap the one that has waited
longest without finishing a request is dropped to make room.

uvicorn waits for a request's headers and body without a deadline (a client that sends
`Content-Length: 100000` and never the body holds its connection and a descriptor forever:
1,500 such clients held 1,509 descriptors 32 s later), and its `limit_concurrency` answers 503
to everyone once the slow clients fill it. This is uvicorn's h11 protocol with both added;
idle keep-alive connections close after uvicorn's `timeout_keep_alive` as before.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.h11_impl import H11Protocol


def protocol(request_timeout: float, max_connections: int) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a request deadline and a cap on connections held."""

    class Guarded(H11Protocol):
        unfinished: dict[Guarded, None] = {}  # connections mid-request, oldest first

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.deadline: asyncio.TimerHandle | None = None
            self._arm()
            if len(self.connections) > max_connections:
                self._drop_stalest()

        def data_received(self, data: bytes) -> None:
            if self.deadline is None and self._between_requests():
                self._arm()  # the next request on a kept-alive connection
            super().data_received(data)
            if self.cycle is not None and not self.cycle.more_body:
                self._disarm()  # all of it is here: the app's time is not the client's

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _between_requests(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            self.deadline = self.loop.call_later(request_timeout, self._expire)
            Guarded.unfinished[self] = None

        def _disarm(self) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
                self.deadline = None
            Guarded.unfinished.pop(self, None)

        def _expire(self) -> None:
            """The request did not arrive in time: the connection is closed."""
            self.deadline = None
            Guarded.unfinished.pop(self, None)
            if not self.transport.is_closing():
                self.transport.close()

        def _drop_stalest(self) -> None:
            """Room for a new connection: the one waiting longest for its request goes; when
            every other one is being answered, the new one is refused."""
            # armed in time order, so the first one is the stalest (a re-armed one moves last)
            stalest = next((c for c in Guarded.unfinished if c is not self), self)
            stalest._expire()

    return Guarded
