#!/usr/bin/env python3
"""Writes the seed corpus of the wire_messages target (fuzz/corpus/wire_messages).

Each seed is one mode byte, then bytes a client would send. The mode byte
picks the connection phase to start in (bits 0-1: 0 SSL negotiation,
1 startup, 2 authentication, 3 ready for query) and bit 2 the protocol
version before startup (0: 3.2, pgwire's default; 1: 3.0); see
fuzz_targets/wire_messages.rs. Run from anywhere: python3 fuzz/make_wire_seeds.py
"""
import os
import struct

SSL, STARTUP, AUTH, READY, V30 = 0, 1, 2, 3, 4


def i16(n):
    return struct.pack(">h", n)


def i32(n):
    return struct.pack(">i", n)


def cstr(s):
    return s.encode() + b"\0"


def msg(kind, body=b""):
    return kind + i32(len(body) + 4) + body


def untyped(body):
    return i32(len(body) + 4) + body


def startup(minor=0, **params):
    params = params or {"user": "weir", "database": "weir"}
    body = i16(3) + i16(minor)
    for k, v in params.items():
        body += cstr(k) + cstr(v)
    return untyped(body + b"\0")


SSL_REQUEST = untyped(i32(80877103))
GSS_REQUEST = untyped(i32(80877104))


def cancel(pid, key):
    return untyped(i32(80877102) + i32(pid) + key)


def query(sql):
    return msg(b"Q", cstr(sql))


def parse(name, sql, oids=()):
    return msg(b"P", cstr(name) + cstr(sql) + i16(len(oids)) + b"".join(i32(o) for o in oids))


def bind(portal, stmt, formats, params, result_formats):
    body = cstr(portal) + cstr(stmt) + i16(len(formats)) + b"".join(i16(f) for f in formats)
    body += i16(len(params))
    for p in params:
        body += i32(-1) if p is None else i32(len(p)) + p
    body += i16(len(result_formats)) + b"".join(i16(f) for f in result_formats)
    return msg(b"B", body)


def describe(kind, name):
    return msg(b"D", kind + cstr(name))


def execute(portal, max_rows=0):
    return msg(b"E", cstr(portal) + i32(max_rows))


def close(kind, name):
    return msg(b"C", kind + cstr(name))


SYNC, FLUSH, TERMINATE = msg(b"S"), msg(b"H"), msg(b"X")


def sasl_initial(mechanism, data):
    return msg(b"p", cstr(mechanism) + (i32(-1) if data is None else i32(len(data)) + data))


def sasl_response(data):
    return msg(b"p", data)


def password(text):
    return msg(b"p", cstr(text))


SEEDS = {
    "ssl_startup_scram_query": bytes([SSL]) + SSL_REQUEST + startup()
    + sasl_initial("SCRAM-SHA-256", b"n,,n=,r=rOprNGfwEbeRWgbNEkqO")
    + sasl_response(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    + query("SELECT 1") + TERMINATE,
    "gss_ssl_startup_32": bytes([SSL]) + GSS_REQUEST + SSL_REQUEST
    + startup(2, user="weir", database="weir", application_name="psql", client_encoding="UTF8"),
    "no_ssl_startup_md5": bytes([SSL]) + startup() + password("md5a3556571e93b0d20722ba62be61e8c2d") + SYNC,
    "startup_params": bytes([STARTUP]) + startup(0, user="analyst", database="weir", options="-c search_path=public", DateStyle="ISO, MDY", replication="false"),
    "startup_3_9999": bytes([STARTUP]) + startup(9999, user="weir", _pq_="x"),
    "startup_bad_major": bytes([STARTUP]) + untyped(i16(2) + i16(0) + b"user\0weir\0\0"),
    "cancel_30": bytes([STARTUP | V30]) + cancel(4242, i32(-559038737)),
    "cancel_32": bytes([STARTUP]) + cancel(4242, bytes(range(32))),
    "cancel_before_ssl": bytes([SSL]) + cancel(7, i32(1234)),
    "sasl_initial": bytes([AUTH]) + sasl_initial("SCRAM-SHA-256", b"n,,n=weir,r=fyko+d2lbbFgONRv9qkxdawL"),
    "sasl_initial_no_data": bytes([AUTH]) + sasl_initial("SCRAM-SHA-256-PLUS", None),
    "sasl_response": bytes([AUTH]) + sasl_response(b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="),
    "password": bytes([AUTH]) + password("secret"),
    "query": bytes([READY]) + query("SELECT 1; SELECT 2"),
    "query_ddl": bytes([READY]) + query(
        "CREATE MATERIALIZED VIEW v AS SELECT window_start, count(*) FROM TUMBLE(t, ts, INTERVAL '5' MINUTE) GROUP BY window_start EMIT ON WINDOW CLOSE"),
    "query_empty": bytes([READY]) + query(""),
    "extended_roundtrip": bytes([READY]) + parse("s1", "SELECT $1::int4, $2::text", (23, 25))
    + bind("", "s1", (1, 0), (i32(42), b"hello"), (1,))
    + describe(b"P", "") + execute("", 0) + SYNC,
    "extended_unnamed": bytes([READY | V30]) + parse("", "INSERT INTO t VALUES ($1, $2)", ())
    + bind("p1", "", (), (b"1", None), ()) + describe(b"S", "") + execute("p1", 100)
    + close(b"P", "p1") + close(b"S", "") + FLUSH + SYNC,
    "bind_one_format": bytes([READY]) + bind("", "s", (1,), (i32(1), i32(2), None), (0, 1, 0)),
    "describe_close": bytes([READY]) + describe(b"S", "stmt") + describe(b"P", "portal")
    + close(b"S", "stmt") + close(b"P", "portal") + SYNC,
    "execute_limit": bytes([READY]) + execute("portal", 10) + execute("", -1) + SYNC,
    "copy_in": bytes([READY]) + query("COPY t FROM STDIN WITH (FORMAT csv)")
    + msg(b"d", b"1,a\n2,b\n") + msg(b"d", b"3,\"c\"\n") + msg(b"c"),
    "copy_fail": bytes([READY]) + msg(b"d", b"1\tx\n") + msg(b"f", cstr("client gave up")),
    "terminate": bytes([READY]) + TERMINATE,
    "pipeline_subscribe": bytes([READY]) + query("DECLARE c CURSOR FOR SUBSCRIBE v") + query("FETCH 10 c WITH (timeout = '1s')") + SYNC,
}


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "wire_messages")
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"{len(SEEDS)} seeds in {out}")


if __name__ == "__main__":
    main()
