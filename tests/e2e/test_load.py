"""P0-11 under load: 1,000 connections opened and dropped (some sending garbage or a
half HTTP/2 preface), many concurrent calls, fresh channels in parallel; afterwards the
daemon's open fds return to their baseline and it still serves. Also SIGTERM while calls
are in flight ends with exit 0."""

import os
import signal
import socket
import threading
import time

from warmd_harness import START_TIMEOUT, DaemonTest, grpc, main, metric, pb, pbg


class LoadTest(DaemonTest):
    def wait_fds(self, d, baseline, slack=5):
        end = time.monotonic() + START_TIMEOUT
        while time.monotonic() < end:
            n = d.fds()
            if n <= baseline + slack:
                return n
            time.sleep(0.1)
        return d.fds()

    def test_connection_flood(self):
        d = self.daemon().start()
        st = d.stub()
        st.GetInfo(pb.GetInfoRequest())
        baseline = d.fds()
        payloads = [b"", b"\x00" * 64, b"GET / HTTP/1.1\r\n\r\n", b"PRI * HTTP/2.0\r\n",
                    os.urandom(4096)]
        for i in range(1000):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.socket)
            p = payloads[i % len(payloads)]
            if p:
                try:
                    s.sendall(p)
                except OSError:
                    pass
            s.close()
        end = time.monotonic() + START_TIMEOUT
        accepted = 0
        while accepted < 1001 and time.monotonic() < end:  # the accept loop runs async
            text = st.Metrics(pb.MetricsRequest()).text
            accepted = metric(text, "warmd_connections_accepted_total")
        self.assertGreaterEqual(accepted, 1001)
        n = self.wait_fds(d, baseline)
        self.assertLessEqual(n, baseline + 5, f"fds {n}, baseline {baseline}")
        self.assertEqual(st.GetInfo(pb.GetInfoRequest()).api_version, "warm.v1")
        self.assertEqual(d.stop(), 0)

    def test_concurrent_calls_and_channels(self):
        d = self.daemon(config="max_streams = 16\n").start()
        st = d.stub()
        baseline = d.fds()
        errors = []

        def shared_channel_worker():
            for _ in range(20):
                try:
                    st.GetInfo(pb.GetInfoRequest(), timeout=60)
                    st.ListModels(pb.ListModelsRequest(), timeout=60)
                except grpc.RpcError as e:
                    errors.append(e.code())

        def fresh_channel_worker():
            for _ in range(5):
                ch = d.channel()
                try:
                    pbg.WarmStub(ch).GetInfo(pb.GetInfoRequest(), timeout=60)
                except grpc.RpcError as e:
                    errors.append(e.code())
                ch.close()

        threads = [threading.Thread(target=shared_channel_worker) for _ in range(32)]
        threads += [threading.Thread(target=fresh_channel_worker) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        n = self.wait_fds(d, baseline)
        self.assertLessEqual(n, baseline + 5)
        text = st.Metrics(pb.MetricsRequest()).text
        self.assertEqual(metric(text, 'warmd_rpc_requests_total{method="GetInfo"}'), 32 * 20 + 100)
        self.assertEqual(d.stop(), 0)

    def test_sigterm_with_calls_in_flight(self):
        d = self.daemon().start()
        stop = threading.Event()
        codes = set()

        def worker():
            ch = d.channel()
            s = pbg.WarmStub(ch)
            while not stop.is_set():
                try:
                    s.GetInfo(pb.GetInfoRequest(), timeout=10)
                    codes.add("OK")
                except grpc.RpcError as e:
                    codes.add(e.code().name)
                    if e.code() == grpc.StatusCode.UNAVAILABLE:
                        break
            ch.close()

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        # SIGTERM once calls are flowing (a poll: a slow machine may take a while to
        # answer the first one)
        end = time.monotonic() + START_TIMEOUT
        while "OK" not in codes and time.monotonic() < end:
            time.sleep(0.02)
        self.assertEqual(d.stop(signal.SIGTERM), 0, d.text())
        stop.set()
        for t in threads:
            t.join()
        self.assertIn("OK", codes)
        self.assertLessEqual(codes, {"OK", "UNAVAILABLE", "CANCELLED"})
        self.assertIn("stopped", d.text())
        self.assertFalse(os.path.exists(d.socket))


if __name__ == "__main__":
    main()
