"""A small threaded TCP proxy for the fault tests: forwards a local port to a server and adds
latency on demand (``proxy.delay`` seconds before each chunk the server sends is passed on), so
that a store can be made slow without touching the server.

    with TcpProxy("127.0.0.1", 5432) as proxy:
        ...connect to 127.0.0.1:proxy.port...
        proxy.delay = 0.2   # every answer from the server now comes 200 ms late
        proxy.delay = 0.0   # back to normal

One thread accepts; each connection gets two pump threads (client -> server, server -> client).
``close()`` (or leaving the ``with`` block) stops accepting and cuts every connection, so the
server sees its sessions end.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType


class TcpProxy:
    def __init__(self, target_host: str, target_port: int, *, host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        #: seconds added before each chunk from the server is forwarded to the client
        self.delay = 0.0
        #: connections accepted so far
        self.accepted = 0
        self._listener = socket.create_server((host, 0))
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, name="tcpproxy-accept", daemon=True)

    def start(self) -> TcpProxy:
        self._acceptor.start()
        return self

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def open_connections(self) -> int:
        """Client connections currently forwarded."""
        with self._lock:
            return len(self._sockets) // 2

    def close(self) -> None:
        """Stop accepting and cut every forwarded connection."""
        self._closed.set()
        if self._acceptor.is_alive():
            self._acceptor.join(5)
        self._listener.close()
        with self._lock:
            socks = list(self._sockets)
            self._sockets.clear()
        for s in socks:
            _cut(s)
        for t in list(self._threads):
            t.join(5)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _cut(client)
                continue
            server.settimeout(None)
            client.settimeout(None)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed.is_set():
                    _cut(client)
                    _cut(server)
                    return
                self._sockets.update((client, server))
                self.accepted += 1
            pair = (client, server)
            for src, dst, slow in ((client, server, False), (server, client, True)):
                t = threading.Thread(
                    target=self._pump,
                    args=(src, dst, slow, pair),
                    name="tcpproxy-pump",
                    daemon=True,
                )
                self._threads.append(t)
                t.start()

    def _pump(
        self,
        src: socket.socket,
        dst: socket.socket,
        slow: bool,
        pair: tuple[socket.socket, socket.socket],
    ) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if slow:
                    delay = self.delay
                    if delay > 0:
                        time.sleep(delay)
                dst.sendall(data)
        except OSError:
            pass
        # one side hung up (or failed): end the whole connection
        with self._lock:
            for s in pair:
                self._sockets.discard(s)
        for s in pair:
            _cut(s)


def _cut(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
