"""The small HTTP/1.1 client against scripted raw replies on loopback (a test double: these are
the framings and malformations real servers do not produce on demand). Its reads against real
servers (moto, SeaweedFS) run through the S3 store contract suite in tests/contract."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neffcache.store.http1 import (
    MAX_HEADERS,
    MAX_INTERIM,
    MAX_LINE,
    Connection,
    IncompleteBody,
    ProtocolError,
    Response,
)
from tests.support.raw_http_double import RawHttpDouble, RawReply, raw_http_double


@pytest.fixture
def double() -> Iterator[RawHttpDouble]:
    with raw_http_double() as d:
        yield d


def connect(d: RawHttpDouble) -> Connection:
    conn = Connection("127.0.0.1", d.port)
    conn.connect(2.0, 2.0)
    return conn


def get(conn: Connection, target: str = "/b/k", method: str = "GET") -> Response:
    return conn.send(method, target, {"host": "h", "x-amz-date": "20300101T000000Z"})


def reply(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    head = [f"HTTP/1.1 {status}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def chunked(body: bytes, sizes: list[int], ext: str = "", trailers: str = "") -> bytes:
    out, i = b"", 0
    for n in sizes:
        out += f"{n:x}{ext}\r\n".encode() + body[i:i + n] + b"\r\n"
        i += n
    assert i == len(body)
    return out + b"0\r\n" + trailers.encode() + b"\r\n"


def read_all_by(resp: Response, step: int) -> bytes:
    buf, out = bytearray(step), bytearray()
    while n := resp.readinto(buf):
        out += buf[:n]
    return bytes(out)


def test_content_length_bodies_keep_the_connection(double: RawHttpDouble) -> None:
    double.script += [RawReply(reply(b"hello", "Content-Length: 5")),
                      RawReply(reply(b"world!", "Content-Length: 6"), pieces=3)]
    conn = connect(double)
    first = get(conn)
    assert (first.status, first.read(), first.complete) == (200, b"hello", True)
    assert conn.reusable
    second = get(conn, "/b/other")
    assert read_all_by(second, 4) == b"world!" and conn.reusable
    assert double.connections == 1
    assert double.requests[0].startswith(b"GET /b/k HTTP/1.1\r\nhost: h\r\n")
    assert double.requests[1].startswith(b"GET /b/other HTTP/1.1\r\n")


def test_request_is_one_line_per_header_and_refuses_line_breaks(double: RawHttpDouble) -> None:
    conn = connect(double)
    for bad in ({"x-a": "v\r\nx-evil: 1"}, {"x-a\n": "v"}, {"x-a": "v\0"}):
        with pytest.raises(ValueError):
            conn.send("GET", "/k", bad)
    with pytest.raises(ValueError):
        conn.send("GET", "/a b", {})
    assert double.requests == []  # nothing was sent


def test_chunked_body_across_chunk_boundaries_with_extensions_and_trailers(
        double: RawHttpDouble) -> None:
    body = bytes(range(256)) * 10
    double.script += [RawReply(reply(chunked(body, [1, 1000, 7, 1552], ext=";name=v",
                                             trailers="x-checksum: abc\r\n"),
                                     "Transfer-Encoding: chunked"), pieces=9),
                      RawReply(reply(b"ok", "Content-Length: 2"))]
    conn = connect(double)
    resp = get(conn)
    assert read_all_by(resp, 300) == body and resp.complete
    assert resp.readinto(bytearray(10)) == 0
    assert get(conn).read() == b"ok"  # the trailers were consumed: the next reply parses
    assert double.connections == 1


@settings(max_examples=30, deadline=None)
@given(st.binary(min_size=0, max_size=3000), st.integers(1, 5000), st.randoms())
def test_chunked_bodies_read_back_whole(body: bytes, step: int, rnd: random.Random) -> None:
    sizes, left = [], len(body)
    while left:
        sizes.append(rnd.randint(1, left))
        left -= sizes[-1]
    with raw_http_double() as d:
        d.script.append(RawReply(reply(chunked(body, sizes), "Transfer-Encoding: chunked"),
                                 pieces=rnd.randint(1, 5)))
        conn = connect(d)
        resp = get(conn)
        assert read_all_by(resp, step) == body
        assert resp.complete and conn.reusable
        conn.close()


def test_read_with_a_size_returns_at_most_that_many(double: RawHttpDouble) -> None:
    double.script.append(RawReply(reply(b"abcdefgh", "Content-Length: 8")))
    resp = get(connect(double))
    assert resp.read(3) == b"abc"
    assert not resp.complete
    assert resp.read(100) == b"defgh" and resp.complete and resp.read(5) == b""


@pytest.mark.parametrize("headers", [("Connection: close", "Content-Length: 2"),
                                     ("Transfer-Encoding: chunked", "Content-Length: 2")])
def test_connection_is_not_reused_when_the_reply_says_so(double: RawHttpDouble,
                                                         headers: tuple[str, str]) -> None:
    body = chunked(b"ok", [2]) if "chunked" in headers[0] else b"ok"
    double.script.append(RawReply(reply(body, *headers)))
    conn = connect(double)
    resp = get(conn)
    assert resp.read() == b"ok"
    assert not conn.reusable


def test_body_without_length_is_read_to_the_close(double: RawHttpDouble) -> None:
    double.script.append(RawReply(reply(b"until the end"), close=True))
    conn = connect(double)
    resp = get(conn)
    assert resp.read() == b"until the end" and resp.complete
    assert not conn.reusable


@pytest.mark.parametrize("method,status", [("HEAD", "200 OK"), ("GET", "204 No Content"),
                                           ("GET", "304 Not Modified")])
def test_replies_without_a_body(double: RawHttpDouble, method: str, status: str) -> None:
    double.script += [RawReply(reply(b"", "Content-Length: 10", status=status)),
                      RawReply(reply(b"next", "Content-Length: 4"))]
    conn = connect(double)
    resp = get(conn, method=method)
    assert resp.complete and resp.read() == b"" and conn.reusable
    assert resp.header("content-length") == "10"
    assert get(conn).read() == b"next"


def test_interim_replies_are_skipped(double: RawHttpDouble) -> None:
    double.script.append(RawReply(b"HTTP/1.1 100 Continue\r\n\r\n" +
                                  reply(b"x", "Content-Length: 1", status="404 Not Found")))
    resp = get(connect(double))
    assert (resp.status, resp.read()) == (404, b"x")


def test_endless_interim_replies_are_refused(double: RawHttpDouble) -> None:
    double.script.append(RawReply(b"HTTP/1.1 100 Continue\r\n\r\n" * (MAX_INTERIM + 1) +
                                  reply(b"x", "Content-Length: 1")))
    conn = connect(double)
    with pytest.raises(ProtocolError, match="interim"):
        get(conn)
    assert not conn.reusable and conn.sock is None


def test_headers_are_lowercased_and_repeats_joined(double: RawHttpDouble) -> None:
    double.script.append(RawReply(reply(b"", "X-Amz-Thing: a", "x-amz-thing:  b ",
                                        "Date: Mon, 01 Jan 2030 00:00:00 GMT",
                                        "Content-Length: 0")))
    resp = get(connect(double))
    assert resp.header("X-AMZ-THING") == "a, b"
    assert resp.header("date") == "Mon, 01 Jan 2030 00:00:00 GMT"
    assert resp.header("missing") is None


def test_an_unread_body_blocks_the_next_request(double: RawHttpDouble) -> None:
    double.script.append(RawReply(reply(b"0123456789", "Content-Length: 10")))
    conn = connect(double)
    get(conn).read(4)
    assert not conn.reusable
    with pytest.raises(ProtocolError, match="not read to its end"):
        get(conn)


@pytest.mark.parametrize("data,expected", [
    (reply(b"abc", "Content-Length: 10"), (3, 10)),
    (reply(b"4\r\nabcd\r\n5\r\nab", "Transfer-Encoding: chunked"), (6, None)),
    (reply(b"4\r\nabcd\r\n", "Transfer-Encoding: chunked"), (4, None)),
])
def test_a_body_cut_short_is_incomplete_never_data(double: RawHttpDouble, data: bytes,
                                                   expected: tuple[int, int | None]) -> None:
    double.script.append(RawReply(data, close=True))
    resp = get(connect(double))
    with pytest.raises(IncompleteBody) as info:
        read_all_by(resp, 2)
    assert (info.value.received, info.value.expected) == expected
    assert not resp.complete


@pytest.mark.parametrize("data,message", [
    (b"", "closed before a response"),
    (b"HTTP/1.1 200", "closed inside a reply line"),
    (b"HTTP/2 200 OK\r\n\r\n", "status line"),
    (b"ICY 200 OK\r\n\r\n", "status line"),
    (b"HTTP/1.1 2000 OK\r\n\r\n", "status line"),
    (b"HTTP/1.1 099 Low\r\n\r\n", "below 100"),
    (reply(b"", "X-A: 1", " folded", "Content-Length: 0"), "folding"),
    (reply(b"", "no colon here"), "malformed header"),
    (reply(b"", "Bad : spaced name"), "malformed header"),
    (reply(b"", *[f"X-{i}: v" for i in range(MAX_HEADERS + 1)]), "more than"),
    (reply(b"", "X-Long: " + "a" * MAX_LINE), "longer than"),
    (reply(b"", "Content-Length: 1, 2"), "conflicting Content-Length"),
    (reply(b"", "Content-Length: -1"), "invalid Content-Length"),
    (reply(b"", "Content-Length: 0x10"), "invalid Content-Length"),
    (reply(b"", "Content-Length: 99999999999999999999"), "invalid Content-Length"),
])
def test_malformed_replies_are_protocol_errors(double: RawHttpDouble, data: bytes,
                                               message: str) -> None:
    double.script.append(RawReply(data, close=True))
    conn = connect(double)
    with pytest.raises(ProtocolError, match=message):
        get(conn)
    assert not conn.reusable  # a failed exchange closes the connection


@pytest.mark.parametrize("body,message", [
    (b"zz\r\nab\r\n0\r\n\r\n", "invalid chunk size"),
    (b"-1\r\nab\r\n0\r\n\r\n", "invalid chunk size"),
    (b"1" * 17 + b"\r\n", "invalid chunk size"),
    (b"2\r\nabc\r\n0\r\n\r\n", "longer than its size"),
])
def test_malformed_chunks_are_protocol_errors(double: RawHttpDouble, body: bytes,
                                              message: str) -> None:
    double.script.append(RawReply(reply(body, "Transfer-Encoding: chunked"), close=True))
    resp = get(connect(double))
    with pytest.raises(ProtocolError, match=message):
        read_all_by(resp, 64)


def test_a_closed_connection_refuses_to_send() -> None:
    with pytest.raises(ProtocolError, match="not open"):
        Connection("127.0.0.1", 9).send("GET", "/", {})
