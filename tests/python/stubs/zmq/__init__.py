# SPDX-License-Identifier: MIT
"""zmq's Context with ROUTER (bind) and REQ (connect) sockets, as the connector uses them: one
request and one reply per REQ socket. "tcp://HOST:PORT" is a Unix socket named HOST_PORT in
$STUB_ZMQ_DIR, so the prefill and decode processes of a test reach each other's listeners
under the host names of their rank table, which no resolver knows. Frames are length-prefixed."""

import os
import socket
import struct
import time

ROUTER = 6
REQ = 3
CONNECT_CEILING_S = 60


class ZMQError(Exception):
    pass


def _path(addr):
    if not addr.startswith("tcp://"):
        raise ZMQError(f"zmq stub: only tcp:// addresses: {addr}")
    host, _, port = addr[len("tcp://"):].rpartition(":")
    return os.path.join(os.environ["STUB_ZMQ_DIR"], f"{host}_{int(port)}")


def _send(conn, data):
    conn.sendall(struct.pack("!I", len(data)) + bytes(data))


def _recv_exact(conn, n):
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise ZMQError("zmq stub: connection closed")
        buf += chunk
    return buf


def _recv(conn):
    (n,) = struct.unpack("!I", _recv_exact(conn, 4))
    return _recv_exact(conn, n)


class Socket:
    def __init__(self, kind):
        self.kind = kind
        self.sock = None
        self.peers = {}
        self.path = None

    def bind(self, addr):
        self.path = _path(addr)
        if os.path.exists(self.path):
            os.unlink(self.path)    # a restarted node binds its address again
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(16)

    def connect(self, addr):
        path = _path(addr)
        deadline = time.monotonic() + CONNECT_CEILING_S
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                self.sock = s
                return
            except OSError:
                s.close()
                if time.monotonic() > deadline:
                    raise ZMQError(f"zmq stub: nothing listens at {addr}")
                time.sleep(0.01)

    # ROUTER: one frame per accepted connection, answered by send_multipart.
    def recv_multipart(self):
        conn, _ = self.sock.accept()
        identity = str(id(conn)).encode()
        self.peers[identity] = conn
        return [identity, b"", _recv(conn)]

    def send_multipart(self, frames):
        identity, _, data = frames
        conn = self.peers.pop(identity)
        try:
            _send(conn, data)
        finally:
            conn.close()

    # REQ
    def send(self, data):
        _send(self.sock, data)

    def recv(self):
        return _recv(self.sock)

    def close(self, linger=None):
        if self.sock is not None:
            self.sock.close()
        for conn in self.peers.values():
            conn.close()


class Context:
    def __init__(self):
        self.sockets = []

    def socket(self, kind):
        s = Socket(kind)
        self.sockets.append(s)
        return s

    def destroy(self, linger=None):
        for s in self.sockets:
            s.close(linger)
