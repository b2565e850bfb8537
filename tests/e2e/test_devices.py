"""Issue 14: config `device`. device = auto on a machine (or build) without a usable CUDA
device runs on the CPU and says why once in the log; GetInfo lists the devices the loaded
models really use, with the bytes reserved there, and `features` names them; the metrics
carry the reserved bytes per device kind. device = cuda:0 where the engine cannot run on
CUDA is refused at model load with a message that names why."""

import os

from warmd_harness import DaemonTest, grpc, main, metric, pb, write_model

NOTE = "no usable CUDA device ("


class DevicesTest(DaemonTest):
    def test_auto_runs_on_cpu(self):
        d = self.daemon()
        write_model(os.path.join(d.models, "a.gguf"))
        write_model(os.path.join(d.models, "b.gguf"))
        d.start()
        st = d.stub()
        info = st.GetInfo(pb.GetInfoRequest())
        self.assertEqual(list(info.devices), [], "no model loaded: no device in use")
        self.assertNotIn("cpu", info.features)
        self.assertNotIn("cuda", info.features)
        st.LoadModel(pb.LoadModelRequest(model="a"))
        info = st.GetInfo(pb.GetInfoRequest())
        self.assertEqual([(x.name, x.kind) for x in info.devices], [("cpu", "cpu")])
        one = info.devices[0].reserved_bytes
        self.assertGreater(one, 0)
        self.assertIn("cpu", info.features)
        self.assertNotIn("cuda", info.features)
        # a second model on the same device: one row, its bytes added
        st.LoadModel(pb.LoadModelRequest(model="b"))
        info = st.GetInfo(pb.GetInfoRequest())
        self.assertEqual(len(info.devices), 1)
        self.assertEqual(info.devices[0].reserved_bytes, 2 * one)
        text = st.Metrics(pb.MetricsRequest()).text
        self.assertEqual(metric(text, "warmd_device_cpu_reserved_bytes"), 2 * one)
        self.assertEqual(metric(text, "warmd_device_cuda_reserved_bytes"), 0)
        log = d.text()
        self.assertEqual(log.count(NOTE), 1, log)
        self.assertIn("running on the CPU", log)

    def test_cpu_partitions_listed(self):
        d = self.daemon(config="device = cpu\ndevices = cpu,cpu\nsplit = tensor\n")
        write_model(os.path.join(d.models, "a.gguf"))
        d.start()
        st = d.stub()
        st.LoadModel(pb.LoadModelRequest(model="a"))
        info = st.GetInfo(pb.GetInfoRequest())
        self.assertEqual([x.name for x in info.devices], ["cpu0", "cpu1"])
        self.assertTrue(all(x.kind == "cpu" and x.reserved_bytes > 0 for x in info.devices))
        self.assertNotIn(NOTE, d.text(), "device = cpu asks for no GPU")

    def test_cuda_refused_with_reason(self):
        d = self.daemon(config="device = cuda:0\n")
        write_model(os.path.join(d.models, "a.gguf"))
        d.start()
        st = d.stub()
        with self.assertRaises(grpc.RpcError) as cm:
            st.LoadModel(pb.LoadModelRequest(model="a"))
        msg = cm.exception.details()
        self.assertIn("device cuda:0: ", msg)
        self.assertTrue(any(w in msg for w in ("no CUDA backend", "no GPU", "does not run")), msg)
        self.assertEqual(list(st.GetInfo(pb.GetInfoRequest()).devices), [])

    def test_bad_device_refused_at_start(self):
        d = self.daemon(config="device = gpu\n").start(wait=False)
        self.assertNotEqual(d.proc.wait(timeout=60), 0)
        self.assertIn('device "gpu" is not auto, cpu or cuda:N', d.text())


if __name__ == "__main__":
    main()
