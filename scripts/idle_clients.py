"""Keep-alive clients that send one request and then stay idle until the server closes them.

Each client notes the monotonic clock (the clock the server's timers run on) just before it
sends its request. The server can only start its idle timeout once it has read that request,
so a close seen sooner than the idle timeout after that instant is an early close.
"""

import asyncio
import time

REQUEST = b"GET /idle HTTP/1.1\r\nHost: localhost\r\n\r\n"


class IdleClient:
    def __init__(self):
        self.status = None
        self.sent = None
        self.closed_after = None  # seconds from the request to the server's close
        self.error = None

    async def open(self, port):
        """Connects, sends one request and reads its response."""
        try:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port)
            self.sent = time.monotonic()
            self.writer.write(REQUEST)
            await self.writer.drain()
            head = await self.reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            self.status = int(lines[0].split()[1])
            length = next(int(l.split(":", 1)[1]) for l in lines if l.lower().startswith("content-length:"))
            await self.reader.readexactly(length)
        except (OSError, asyncio.IncompleteReadError, ValueError, StopIteration) as error:
            self.error = f"open: {error!r}"

    async def wait_closed(self):
        """Waits, sending nothing, until the server closes the connection."""
        if self.error:
            return
        try:
            extra = await self.reader.read(1)
            if extra:
                self.error = f"unexpected bytes {extra!r}"
                return
        except ConnectionResetError:
            pass  # a close with data unread is still the server's close
        except OSError as error:
            self.error = f"wait: {error!r}"
            return
        self.closed_after = time.monotonic() - self.sent
        self.writer.close()


async def open_idle_clients(port, count):
    """Opens `count` idle clients at once; returns them once every one has its response."""
    clients = [IdleClient() for _ in range(count)]
    await asyncio.gather(*(client.open(port) for client in clients))
    return clients


def summarize(clients, idle_timeout_s, late_after_s):
    """What the idle clients saw: how many were answered and closed, how many closed before
    the idle timeout or later than `late_after_s`, and the first and last close."""
    closed = [c.closed_after for c in clients if c.closed_after is not None]
    return {
        "idle_left": len(clients),
        "idle_answered": sum(1 for c in clients if c.status == 200),
        "idle_seen_closed": len(closed),
        "idle_early": sum(1 for after in closed if after < idle_timeout_s),
        "idle_late": sum(1 for after in closed if after > late_after_s),
        "idle_first_close_ms": round(min(closed) * 1000, 1) if closed else "-",
        "idle_last_close_ms": round(max(closed) * 1000, 1) if closed else "-",
        "idle_errors": [c.error for c in clients if c.error][:3],
    }
