#!/usr/bin/python3
"""A plain TCP stream and an 8-byte ping-pong between two hosts: the link's
own capacity, next to which bench/multihost.sh puts MPI's figures.
  tcp_probe.py serve PORT                 (on one host)
  tcp_probe.py probe ADDRESS PORT SECONDS (on the other: prints one JSON line)"""
import json
import socket
import sys
import time

CHUNK = 1 << 20


def serve(port):
    with socket.create_server(("0.0.0.0", port)) as server:
        for _ in range(2):
            conn, _ = server.accept()
            with conn:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                mode = conn.recv(1)
                if mode == b"s":  # stream: read until the client closes
                    buf = bytearray(CHUNK)
                    while conn.recv_into(buf):
                        pass
                else:  # ping-pong: echo 8 bytes until the client closes
                    while True:
                        data = conn.recv(8)
                        if not data:
                            break
                        conn.sendall(data)


def probe(address, port, seconds):
    result = {}
    with socket.create_connection((address, port)) as s:
        s.sendall(b"s")
        payload = b"\0" * CHUNK
        sent, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            s.sendall(payload)
            sent += CHUNK
        s.shutdown(socket.SHUT_WR)
        s.recv(1)
        result["stream_GBps"] = sent / (time.perf_counter() - start) / 1e9
    time.sleep(0.2)
    with socket.create_connection((address, port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b"p")
        rounds, times = 0, []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t = time.perf_counter()
            s.sendall(b"12345678")
            got = b""
            while len(got) < 8:
                got += s.recv(8 - len(got))
            times.append(time.perf_counter() - t)
            rounds += 1
        times.sort()
        result["pingpong_half_rtt_us"] = times[len(times) // 2] / 2 * 1e6
    print(json.dumps(result))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    else:
        probe(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
