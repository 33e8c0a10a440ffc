#!/usr/bin/python3
"""Stand-in for wgtrain's rank-0 /metrics endpoint, for testing the monitoring
files without building or running the trainer.

Serves every family of monitoring/METRICS.md for N ranks (values move a little
per scrape), writes a file_sd target file <file_sd_dir>/wgtrain-<run_id>.json
(labels run_id, slurm_job_id, config) like the trainer does, and removes it on
SIGTERM/SIGINT. As with the trainer, run_id reaches the per-rank series only
through those target labels, not through the exposition.

  fake_exporter.py --file-sd-dir DIR [--ranks 4] [--run-id fake] [--port 0]

Stdlib only. Not a reference of the trainer's exposition: METRICS.md is.
"""

import argparse
import http.server
import json
import math
import os
import signal
import socket
import sys
import threading
import time

BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]
SECTIONS = {"embed.ERA5": ["input", "block0.attn", "block0.mlp", "readout"],
            "ae_local": ["block0.attn", "block0.mlp"],
            "ae_adapter": ["block0.cross", "block0.mlp", "block1.cross"],
            "ae_aggregation": ["block0.attn", "block0.mlp"],
            "ae_global": ["block0.attn", "block0.mlp"],
            "pred.ERA5": ["input", "block0.cross", "block0.attn", "block0.mlp", "head"]}
STREAMS = ["ERA5", "NPPATMS"]


class State:
    def __init__(self, ranks, run_id):
        self.ranks, self.run_id = ranks, run_id
        self.start = time.time()
        self.lock = threading.Lock()

    def render(self):
        with self.lock:
            t = time.time() - self.start
            step = int(t * 4) + 1          # 4 steps/s
            host = socket.gethostname()
            out = []

            def fam(name, typ, help_):
                out.append("# HELP %s %s" % (name, help_))
                out.append("# TYPE %s %s" % (name, typ))

            def lbl(r, **extra):
                d = {"rank": str(r), "node": "%s-%d" % (host, r // 2), "local_rank": str(r % 2), "device": "cpu"}
                d.update(extra)
                return "{" + ",".join('%s="%s"' % kv for kv in d.items()) + "}"

            def per_rank(name, typ, help_, fn):
                fam(name, typ, help_)
                for r in range(self.ranks):
                    out.append("%s%s %s" % (name, lbl(r), repr(float(fn(r)))))

            fam("wgtrain_run_info", "gauge", "run identity")
            out.append('wgtrain_run_info{run_id="%s",slurm_job_id="",config="fake.yml",version="0.0.0"} 1'
                       % self.run_id)
            fam("wgtrain_ranks", "gauge", "ranks")
            out.append("wgtrain_ranks %d" % self.ranks)
            sps = lambda r: 100.0 - 5 * r + math.sin(t + r)  # noqa: E731
            per_rank("wgtrain_steps_total", "counter", "steps", lambda r: step)
            fam("wgtrain_last_step_timestamp_seconds", "gauge", "last step time")
            out.append("wgtrain_last_step_timestamp_seconds %f" % time.time())
            fam("wgtrain_metrics_window_seconds", "gauge", "window length")
            out.append("wgtrain_metrics_window_seconds 4.0")
            fam("wgtrain_step", "gauge", "step")
            out.append("wgtrain_step %d" % step)
            per_rank("wgtrain_loss", "gauge", "loss", lambda r: 1.0 / (1 + 0.01 * step) + 0.01 * r)
            fam("wgtrain_stream_loss", "gauge", "stream loss")
            for r in range(self.ranks):
                for i, name in enumerate(STREAMS):
                    out.append("wgtrain_stream_loss%s %f" % (lbl(r, stream=name), (1.0 + 0.2 * i) / (1 + 0.01 * step)))
            fam("wgtrain_learning_rate", "gauge", "lr")
            out.append("wgtrain_learning_rate 5e-05")
            fam("wgtrain_validation_loss", "gauge", "validation loss")
            out.append("wgtrain_validation_loss %f" % (1.1 / (1 + 0.01 * step)))
            per_rank("wgtrain_samples_per_second", "gauge", "samples/s", sps)
            per_rank("wgtrain_tokens_per_second", "gauge", "tokens/s", lambda r: 1024 * sps(r))
            fam("wgtrain_job_samples_per_second", "gauge", "sum samples/s")
            out.append("wgtrain_job_samples_per_second %f" % sum(sps(r) for r in range(self.ranks)))
            fam("wgtrain_job_tokens_per_second", "gauge", "sum tokens/s")
            out.append("wgtrain_job_tokens_per_second %f" % sum(1024 * sps(r) for r in range(self.ranks)))
            per_rank("wgtrain_model_flops_per_second", "gauge", "model FLOP/s", lambda r: 2e12 * sps(r))
            fam("wgtrain_job_model_flops_per_second", "gauge", "sum model FLOP/s")
            out.append("wgtrain_job_model_flops_per_second %f" % sum(2e12 * sps(r) for r in range(self.ranks)))
            per_rank("wgtrain_peak_flops", "gauge", "peak FLOP/s", lambda r: 989.4e12)
            per_rank("wgtrain_mfu", "gauge", "MFU", lambda r: 2e12 * sps(r) / 989.4e12)
            fam("wgtrain_step_duration_seconds", "histogram", "step durations")
            for r in range(self.ranks):
                for b in BUCKETS:
                    frac = 0.0 if b < 0.1 else (0.5 if b < 0.25 else (0.95 if b < 0.5 else 1.0))
                    out.append("wgtrain_step_duration_seconds_bucket%s %d"
                               % (lbl(r, le=repr(float(b))), int(step * frac)))
                out.append("wgtrain_step_duration_seconds_bucket%s %d" % (lbl(r, le="+Inf"), step))
                out.append("wgtrain_step_duration_seconds_sum%s %f" % (lbl(r), 0.2 * step))
                out.append("wgtrain_step_duration_seconds_count%s %d" % (lbl(r), step))
            per_rank("wgtrain_data_wait_seconds", "gauge", "data wait", lambda r: 0.001)
            per_rank("wgtrain_data_wait_ratio", "gauge", "data wait ratio", lambda r: 0.005)
            per_rank("wgtrain_sync_wait_seconds", "gauge", "wait for other ranks", lambda r: 0.01 * r)
            per_rank("wgtrain_busy_seconds", "gauge", "step less wait", lambda r: 0.2 - 0.01 * r)
            per_rank("wgtrain_memory_peak_allocated_bytes", "gauge", "alloc peak", lambda r: 2e9 + 1e8 * r)
            per_rank("wgtrain_memory_peak_reserved_bytes", "gauge", "reserved peak", lambda r: 2e9 + 1e8 * r)
            per_rank("wgtrain_device_memory_capacity_bytes", "gauge", "capacity", lambda r: 64e9)
            fam("wgtrain_checkpoint_recomputed", "gauge", "recomputed piece")
            for r in range(self.ranks):
                node = "%s-%d" % (host, r // 2)
                for s, pieces in SECTIONS.items():
                    for i, p in enumerate(pieces):
                        out.append('wgtrain_checkpoint_recomputed{rank="%d",node="%s",section="%s",piece="%s"} %d'
                                   % (r, node, s, p, i % 2))
            fam("wgtrain_checkpoint_pieces_recomputed", "gauge", "recomputed pieces")
            for r in range(self.ranks):
                node = "%s-%d" % (host, r // 2)
                for s, pieces in SECTIONS.items():
                    out.append('wgtrain_checkpoint_pieces_recomputed{rank="%d",node="%s",section="%s"} %d'
                               % (r, node, s, len(pieces) // 2))
            fam("wgtrain_planned_peak_bytes", "gauge", "planned peak")
            for r in range(self.ranks):
                out.append('wgtrain_planned_peak_bytes{rank="%d",node="%s-%d"} 0' % (r, host, r // 2))
            fam("wgtrain_slowest_rank", "gauge", "slowest")
            out.append("wgtrain_slowest_rank %d" % (self.ranks - 1))
            fam("wgtrain_fastest_rank", "gauge", "fastest")
            out.append("wgtrain_fastest_rank 0")
            fam("wgtrain_job_memory_peak_max_bytes", "gauge", "largest peak")
            last = self.ranks - 1
            out.append('wgtrain_job_memory_peak_max_bytes{node="%s-%d",rank="%d"} %f'
                       % (host, last // 2, last, 2e9 + 1e8 * last))
            fam("wgtrain_restarts_total", "counter", "restarts")
            out.append("wgtrain_restarts_total 0")
            per_rank("wgtrain_nonfinite_losses_total", "counter", "non-finite", lambda r: 0)
            per_rank("wgtrain_skipped_steps_total", "counter", "skipped", lambda r: 0)
            per_rank("wgtrain_oom_retries_total", "counter", "oom retries", lambda r: 0)
            per_rank("wgtrain_data_skipped_samples_total", "counter", "unreadable samples", lambda r: 0)
            # like the trainer: the three kinds exist from the start, at 0
            fam("wgtrain_telemetry_failures_total", "counter", "telemetry failures")
            for kind in ("file_sd", "pushgateway", "http"):
                out.append('wgtrain_telemetry_failures_total{kind="%s"} 0' % kind)
            return ("\n".join(out) + "\n").encode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--file-sd-dir", required=True)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--run-id", default="fake")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    state = State(args.ranks, args.run_id)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = state.render()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    port = srv.server_address[1]
    target = os.path.join(args.file_sd_dir, "wgtrain-" + args.run_id + ".json")
    tmp = target + ".tmp"
    with open(tmp, "w") as f:  # write + rename: Prometheus never sees half a file
        json.dump([{"targets": ["127.0.0.1:%d" % port],
                    "labels": {"run_id": args.run_id, "slurm_job_id": "", "config": "fake.yml"}}], f)
    os.replace(tmp, target)
    print("fake_exporter: http://127.0.0.1:%d/metrics, target file %s" % (port, target), flush=True)

    def stop(*_):
        try:
            os.unlink(target)
        except OSError:
            pass
        threading.Thread(target=srv.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
