"""Client-side protocol CPU per request: h11 (what httpcore uses for HTTP/1.1) against h2
(HTTP/2, what `httpx[http2]` would use), each driven in memory against a peer of the same
library: a 6,000-byte JSON request, a ~600-byte answer; only the client's side is timed.
(The loopback server speaks HTTP/1.1 only, so HTTP/2 cannot be timed end to end here.)

    .venv/bin/pip install h2 && .venv/bin/python bench/http_protocols.py
"""

from __future__ import annotations

import time

import h2.config
import h2.connection
import h2.events
import h11

BODY = b"x" * 6000
ANSWER = b'{"choices":[{"message":{"content":"hi"}}]}' * 14
N = 3000
PATH = "/v1/chat/completions"


def h11_client_s() -> float:
    """Seconds of client-side h11 work per request."""
    c, s = h11.Connection(h11.CLIENT), h11.Connection(h11.SERVER)
    client = 0.0
    for _ in range(N):
        t = time.perf_counter()
        data = c.send(h11.Request(method="POST", target=PATH, headers=[
            ("Host", "x"), ("Content-Type", "application/json"),
            ("Content-Length", str(len(BODY)))]))
        data += c.send(h11.Data(data=BODY)) + c.send(h11.EndOfMessage())
        client += time.perf_counter() - t
        s.receive_data(data)
        while not isinstance(s.next_event(), h11.EndOfMessage):
            pass
        out = s.send(h11.Response(status_code=200, headers=[
            ("Content-Type", "application/json"), ("Content-Length", str(len(ANSWER)))]))
        out += s.send(h11.Data(data=ANSWER)) + s.send(h11.EndOfMessage())
        t = time.perf_counter()
        c.receive_data(out)
        got = b""
        while not isinstance(e := c.next_event(), h11.EndOfMessage):
            if isinstance(e, h11.Data):
                got += e.data
        c.start_next_cycle()
        client += time.perf_counter() - t
        s.start_next_cycle()
    return client / N


def h2_client_s() -> float:
    """Seconds of client-side h2 work per request (one stream per request, one
    connection, flow-control windows acknowledged as a client must)."""
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    s = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    c.initiate_connection()
    s.initiate_connection()
    for _ in range(2):
        s.receive_data(c.data_to_send())
        c.receive_data(s.data_to_send())
    client = 0.0
    for _ in range(N):
        t = time.perf_counter()
        sid = c.get_next_available_stream_id()
        c.send_headers(sid, [(":method", "POST"), (":authority", "x"), (":scheme", "http"),
                             (":path", PATH), ("content-type", "application/json"),
                             ("content-length", str(len(BODY)))])
        c.send_data(sid, BODY, end_stream=True)
        data = c.data_to_send()
        client += time.perf_counter() - t
        for e in s.receive_data(data):
            if isinstance(e, h2.events.DataReceived):
                s.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
        s.send_headers(sid, [(":status", "200"), ("content-type", "application/json"),
                             ("content-length", str(len(ANSWER)))])
        s.send_data(sid, ANSWER, end_stream=True)
        out = s.data_to_send()
        t = time.perf_counter()
        got = b""
        for e in c.receive_data(out):
            if isinstance(e, h2.events.DataReceived):
                got += e.data
                c.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
        ack = c.data_to_send()
        client += time.perf_counter() - t
        s.receive_data(ack)
        s.data_to_send()
    return client / N


if __name__ == "__main__":
    for _ in range(3):
        a, b = h11_client_s(), h2_client_s()
        print(f"h11 {1e6 * a:.0f} us/request, h2 {1e6 * b:.0f} us/request ({b / a:.2f}x)")
