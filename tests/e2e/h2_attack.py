"""Hostile HTTP/2 clients of warmd, built on Debian's python3-h2 (a real HTTP/2
implementation: flow control, HPACK), run as their own process, usually under another uid
(setpriv), by tests/e2e/test_abuse.py. Prints one JSON object with what happened.

  h2_attack.py SOCKET incomplete CONNS STREAMS SIZE HOLD   requests that never end
  h2_attack.py SOCKET pipeline CONNS STREAMS TEXT_BYTES HOLD   Tokenize calls, never read
  h2_attack.py SOCKET reset CONNS N                         HEADERS+DATA+RST_STREAM x N
  h2_attack.py SOCKET silent CONNS HOLD                     connections that say nothing
  h2_attack.py SOCKET churn SECONDS                         connect() and close() in a loop
  h2_attack.py SOCKET noread STREAMS MAX_TOKENS HOLD        Generate streams, never read
"""

import json
import socket
import struct
import sys
import time

try:
    import h2.config
    import h2.connection
    import h2.events
    import h2.exceptions
    import h2.settings
except ImportError:
    print(json.dumps({"skip": "python3-h2 is not installed"}))
    sys.exit(0)

SERVICE = "/warm.v1.Warm/"


def field(num, wire, payload):
    """One protobuf field: tag, then a varint or a length-delimited payload."""
    def varint(v):
        out = b""
        while True:
            b = v & 0x7F
            v >>= 7
            if v:
                out += bytes([b | 0x80])
            else:
                return out + bytes([b])
    if wire == 0:
        return varint(num << 3) + varint(payload)
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def grpc_frame(msg):
    return struct.pack(">BI", 0, len(msg)) + msg


class Conn:
    """One HTTP/2 connection over the Unix socket."""

    def __init__(self, path, read=True):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        if not read:  # a client that never reads: it still lets the server send a lot
            self.h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1})
            self.h2.increment_flow_control_window(2**31 - 1 - 65535)
        self.closed = False
        self.out = b""
        self.flush()

    def flush(self):
        """Sends what h2 has queued as far as the socket takes it now; the rest waits
        (the daemon may stop reading: that is what the tests look for)."""
        self.out += self.h2.data_to_send()
        while self.out and not self.closed:
            try:
                n = self.sock.send(self.out, socket.MSG_DONTWAIT)
            except (BlockingIOError, socket.timeout):
                return
            except OSError:
                self.closed = True
                return
            self.out = self.out[n:]

    def pump(self, timeout=0.0):
        """Reads what the server sent; returns the h2 events."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 20)
        except (socket.timeout, BlockingIOError):
            return []
        except OSError:
            self.closed = True
            return []
        if not data:
            self.closed = True
            return []
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.closed = True
            return []
        self.flush()
        return events

    def headers(self, method, end_stream=False):
        sid = self.h2.get_next_available_stream_id()
        self.h2.send_headers(sid, [(":method", "POST"), (":scheme", "http"),
                                   (":path", SERVICE + method), (":authority", "localhost"),
                                   ("content-type", "application/grpc"), ("te", "trailers")],
                             end_stream=end_stream)
        return sid

    def send_some(self, sid, data, end_stream=False):
        """Sends as much of data as the flow-control windows allow; returns bytes sent."""
        if self.out:  # the socket is full: the daemon is not reading
            self.flush()
            return 0
        try:
            n = min(len(data), self.h2.local_flow_control_window(sid),
                    self.h2.max_outbound_frame_size)
        except (h2.exceptions.StreamClosedError, KeyError):
            return -1
        if n <= 0:
            return 0
        self.h2.send_data(sid, data[:n], end_stream=end_stream and n == len(data))
        self.flush()
        return n


def incomplete(path, conns, streams, size, hold):
    """Each stream announces a SIZE-byte message and sends all but its last byte."""
    cs = [Conn(path) for _ in range(conns)]
    left = {}
    for c in cs:
        c.pump(0.2)
        for _ in range(streams):
            sid = c.headers("Tokenize")
            c.flush()
            left[(c, sid)] = grpc_frame(b"\x00" * size)[:-1]
    sent, last_progress, start = 0, time.monotonic(), time.monotonic()
    while left and time.monotonic() - last_progress < 2.0 and time.monotonic() - start < hold:
        for c in cs:
            c.pump(0.01)
        for key in list(left):
            c, sid = key
            if c.closed:
                del left[key]
                continue
            n = c.send_some(sid, left[key])
            if n < 0:
                del left[key]
            elif n:
                left[key] = left[key][n:]
                sent += n
                last_progress = time.monotonic()
    end = time.monotonic() + hold
    while time.monotonic() < end and not all(c.closed for c in cs):
        for c in cs:
            c.pump(0.05)
    return {"sent": sent, "closed": sum(c.closed for c in cs), "conns": conns}


def pipeline(path, conns, streams, text_bytes, hold):
    """Tokenize calls sent whole whose answers are never read: the client takes the
    server's control frames (so its uploads flow) but never acknowledges a byte of the
    answers (no WINDOW_UPDATE), as an HTTP/2 client does whose application stopped
    reading: the server can send 64 KiB and must hold the rest."""
    cs = [Conn(path) for _ in range(conns)]
    body = grpc_frame(field(1, 2, b"m") + field(2, 2, b"a " * (text_bytes // 2)))
    left = {}
    for c in cs:
        c.pump(0.2)
        for _ in range(streams):
            left[(c, c.headers("Tokenize"))] = body
        c.flush()
    sent, start, last = 0, time.monotonic(), time.monotonic()
    while left and time.monotonic() - last < 2.0 and time.monotonic() - start < hold:
        for c in cs:
            c.pump(0.01)
        for key in list(left):
            c, sid = key
            n = -1 if c.closed else c.send_some(sid, left[key], end_stream=True)
            if n < 0:
                del left[key]
            elif n:
                left[key] = left[key][n:]
                sent += n
                last = time.monotonic()
                if not left[key]:
                    del left[key]
    end = time.monotonic() + hold
    while time.monotonic() < end:
        for c in cs:
            c.pump(0.05)
    return {"sent": sent, "closed": sum(c.closed for c in cs), "conns": conns}


def reset(path, conns, n):
    """A complete GetInfo request, reset at once, n times per connection."""
    out = {"sent": 0, "closed": 0, "conns": conns}
    body = grpc_frame(b"")
    for _ in range(conns):
        c = Conn(path)
        c.pump(0.2)
        for i in range(n):
            try:
                sid = c.headers("GetInfo")
                c.h2.send_data(sid, body, end_stream=True)
                c.h2.reset_stream(sid)
            except h2.exceptions.ProtocolError:
                break
            c.flush()
            if c.closed:
                break
            out["sent"] += 1
            if i % 16 == 0:
                c.pump(0)
        deadline = time.monotonic() + 20
        while not c.closed and time.monotonic() < deadline:
            c.pump(0.1)
        out["closed"] += c.closed
    return out


def silent(path, conns, hold):
    """Connections that never send a byte: how many does the daemon close at once?"""
    socks = []
    for _ in range(conns):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
        except OSError:
            break
        socks.append(s)
    time.sleep(min(hold, 1.0))
    refused = 0
    for s in socks:
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                refused += 1
        except BlockingIOError:
            pass
        except OSError:
            refused += 1
    time.sleep(max(hold - 1.0, 0))
    return {"opened": len(socks), "refused": refused}


def churn(path, seconds):
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            n += 1
        except OSError:
            pass
        s.close()
    return {"connects": n}


def noread(path, streams, max_tokens, hold):
    """Generate streams on one connection whose output is never read."""
    c = Conn(path, read=False)
    req = field(1, 2, b"m") + field(2, 2, b"Once upon a time") + field(4, 0, max_tokens)
    for _ in range(streams):
        sid = c.headers("Generate")
        c.send_some(sid, grpc_frame(req), end_stream=True)
    end = time.monotonic() + hold
    while time.monotonic() < end:
        time.sleep(0.1)
        try:  # has the daemon closed it? (peek, never read)
            c.sock.setblocking(False)
            if c.sock.recv(1, socket.MSG_PEEK) == b"":
                c.closed = True
                break
        except BlockingIOError:
            pass
        except OSError:
            c.closed = True
            break
    return {"closed": c.closed}


def main():
    path, kind, args = sys.argv[1], sys.argv[2], [float(a) if "." in a else int(a)
                                                  for a in sys.argv[3:]]
    fn = {"incomplete": incomplete, "pipeline": pipeline, "reset": reset, "silent": silent,
          "churn": churn, "noread": noread}[kind]
    print(json.dumps(fn(path, *args)), flush=True)


if __name__ == "__main__":
    main()
