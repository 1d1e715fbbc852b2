"""AsyncClient against a stand-in server that is slow to read: a request cut off part-way never corrupts the next.

(The client against a real daemon: tests/integration/test_async_client.py.)
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from memd import errors
from memd.async_client import AsyncClient


def test_a_call_that_times_out_while_sending_costs_its_connection_not_the_next_call() -> None:
    async def go() -> tuple[BaseException, Any, list[Any]]:
        seen: list[Any] = []

        handlers: list[asyncio.Task[None]] = []

        async def slow_reader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            handlers.append(asyncio.current_task())  # type: ignore[arg-type]
            try:
                if len(handlers) == 1:  # the first connection is not read at first: the big request fills it
                    await asyncio.sleep(1.0)
                while (line := await reader.readline()).endswith(b"\n"):  # a cut-off last line ends at EOF
                    try:
                        request = json.loads(line)
                    except ValueError:
                        seen.append("garbled")
                        continue
                    seen.append(request.get("method"))
                    answer = {"jsonrpc": "2.0", "id": request["id"], "result": {"method": request["method"]}}
                    writer.write(json.dumps(answer).encode() + b"\n")
                    await writer.drain()
            except (ConnectionError, ValueError):  # the cut-off 4 MiB line is over the limit, or reset
                pass
            finally:
                writer.close()

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "s.sock"
            # The default 64 KiB limit: asyncio stops reading the socket past it, as a busy memd would.
            server = await asyncio.start_unix_server(slow_reader, str(path))
            async with AsyncClient(path, timeout=0.3) as memd:
                big = await asyncio.gather(memd.call("warm.log", text="x" * (4 << 20)), return_exceptions=True)
                after = await asyncio.wait_for(memd.call("ping"), 10)
            server.close()
            await asyncio.wait_for(asyncio.gather(*handlers), 10)
            await server.wait_closed()
            return big[0], after, seen

    cut_off, after, seen = asyncio.run(go())

    assert isinstance(cut_off, errors.Unavailable)  # timed out part-way through sending 4 MiB
    assert after == {"method": "ping"}  # on a new connection, not glued onto the half-sent line
    assert "garbled" not in seen and "ping" in seen
