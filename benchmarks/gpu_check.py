"""GPU check: trainspect on a real CUDA machine, one verdict line per check (PASS / FAIL / SKIP + numbers).

    .venv/bin/python benchmarks/gpu_check.py [--quick]

Runs in under 5 minutes on one GPU. On a machine without CUDA it prints one ``SKIP: no CUDA device`` line per
check and exits 0 at once. Exit status: 1 when a check FAILs, else 0. Checks:

* ``mapping``: the system monitor's gpu{j} is CUDA's device j (NVML UUID == torch's device UUID).
* ``capture``: weights, gradients and losses captured on cuda:0 equal the values read directly (bit-exact).
* ``multi_gpu``: the same with a model split over cuda:0 and cuda:1 (SKIP with one GPU).
* ``overhead_default`` / ``overhead_wgl100``: step time of a ResNet-18 at batch 128 with AMP on synthetic data,
  hook attached/detached in turn on one model (ABBA blocks); targets 1.02x and 1.05x.
* ``nvml_vs_smi``: the monitor's utilisation, memory and power against ``nvidia-smi --query-gpu`` readings.
* ``cuda_memory``: the framework's allocated/reserved/peak metrics against ``torch.cuda``; NVML's per-process
  memory of the job between torch's reserved memory and the device total.
* ``monitor_cpu``: CPU cost of the system monitor at 100 ms with NVML, <= 2 % of one core.
* ``report`` / ``tensorboard``: the HTML report and the TensorBoard tab's routes show the GPU panels.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CHECKS = (
    "mapping",
    "capture",
    "multi_gpu",
    "overhead_default",
    "overhead_wgl100",
    "nvml_vs_smi",
    "cuda_memory",
    "monitor_cpu",
    "report",
    "tensorboard",
)
FAILED: list[str] = []


def verdict(name: str, ok: bool | None, detail: str) -> None:
    """Print one verdict line (``ok=None``: SKIP)."""
    word = "SKIP" if ok is None else ("PASS" if ok else "FAIL")
    if ok is False:
        FAILED.append(name)
    print(f"{word}: {name}: {detail}", flush=True)


def _cuda() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


# --- models ---------------------------------------------------------------------------------------------------
def resnet18(num_classes: int = 1000) -> Any:
    """ResNet-18 (BasicBlock x [2, 2, 2, 2], 11.7 M parameters), in plain torch (no torchvision needed)."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.down = (
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                if stride != 1 or cin != cout
                else nn.Identity()
            )

        def forward(self, x: Any) -> Any:
            y = self.b2(self.c2(self.b1(self.c1(x)).relu()))
            return (y + self.down(x)).relu()

    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    return nn.Sequential(*layers)


class Trainer:
    """ResNet-18, batch 128 at 224x224, AMP (fp16 autocast + GradScaler), SGD, 4 fixed synthetic batches on the GPU."""

    def __init__(self, torch: Any, batch: int = 128, size: int = 224) -> None:
        self.torch = torch
        torch.manual_seed(0)
        torch.backends.cudnn.benchmark = True
        self.model = resnet18().cuda().to(memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.scaler = torch.amp.GradScaler("cuda")
        self.batches = [
            (
                torch.randn(batch, 3, size, size, device="cuda").to(memory_format=torch.channels_last),
                torch.randint(0, 1000, (batch,), device="cuda"),
            )
            for _ in range(4)
        ]

    def train(self, steps: int) -> float:
        """Train ``steps`` steps; the seconds taken, the GPU's work included."""
        torch = self.torch
        torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(steps):
            x, y = self.batches[i % len(self.batches)]
            self.opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.loss_fn(self.model(x), y)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        torch.cuda.synchronize()
        return time.perf_counter() - start


# --- checks ---------------------------------------------------------------------------------------------------
def check_mapping(torch: Any) -> None:
    from trainspect.hooks.samplers.gpu import GPUSampler, GPUUnavailable

    try:
        sampler = GPUSampler()
    except GPUUnavailable as exc:
        verdict("mapping", False, f"NVML unavailable on a CUDA machine: {exc}")
        return
    nvml = [t.uuid for t in sampler.targets]
    sampler.close()

    def bare(u: object) -> str:
        return str(u).lower().removeprefix("gpu-").removeprefix("mig-")

    cuda = [bare(torch.cuda.get_device_properties(d).uuid) for d in range(torch.cuda.device_count())]
    ok = [bare(u) for u in nvml] == cuda
    verdict("mapping", ok, f"NVML gpu0.. {nvml}; torch cuda:0.. {cuda}")


def _direct(model: Any) -> dict[str, Any]:
    return {n: p.detach().cpu().numpy().copy() for n, p in model.named_parameters()}


def _capture_equal(torch: Any, model: Any, inputs: Any, targets: Any, out: str, steps: int = 3) -> tuple[bool, str]:
    """Train ``steps`` steps with a hook saving everything; compare with the values read directly."""
    import numpy as np

    import trainspect as ts

    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    hook = ts.torch.Hook(
        out,
        export_tensorboard=False,
        save_config=ts.SaveConfig(save_interval=1),
        include_collections=["weights", "biases", "gradients", "losses"],
    )
    hook.register_module(model)
    hook.register_loss(loss_fn)
    log = []
    for _ in range(steps):
        weights = _direct(model)
        opt.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        grads = {n: p.grad.detach().cpu().numpy().copy() for n, p in model.named_parameters()}
        opt.step()
        log.append((weights, grads, np.float32(loss.item())))
    hook.close()
    trial = ts.create_trial(out)
    names = trial.tensor_names()
    compared, bad = 0, []
    for step, (weights, grads, loss) in enumerate(log):
        for param, value in weights.items():
            name = next((n for n in names if n.endswith(f"_{param}") and not n.startswith("gradient/")), None)
            for tname, want in ((name, value), (f"gradient/{name}", grads[param])):
                got = trial.tensor(tname).value(step) if tname in names else None
                compared += 1
                if got is None or got.dtype != want.dtype or not np.array_equal(got, want):
                    bad.append(f"{tname}@{step}")
        lname = next((n for n in names if n.endswith("Loss_output_0")), None)
        compared += 1
        if lname is None or float(trial.tensor(lname).value(step)) != float(loss):
            bad.append(f"loss@{step}")
    return not bad, f"{compared} tensors compared, {len(bad)} differ{(': ' + ', '.join(bad[:5])) if bad else ''}"


def check_capture(torch: Any, root: Path) -> None:
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 10)
    ).cuda()
    x, y = torch.randn(32, 3, 16, 16, device="cuda"), torch.randint(0, 10, (32,), device="cuda")
    ok, detail = _capture_equal(torch, model, x, y, str(root / "capture"))
    verdict("capture", ok, detail)


def check_multi_gpu(torch: Any, root: Path) -> None:
    if torch.cuda.device_count() < 2:
        verdict("multi_gpu", None, f"{torch.cuda.device_count()} GPU visible")
        return

    class Split(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(64, 128).to("cuda:0")
            self.b = torch.nn.Linear(128, 10).to("cuda:1")

        def forward(self, x: Any) -> Any:
            return self.b(self.a(x).relu().to("cuda:1", non_blocking=True))

    torch.manual_seed(2)
    model = Split()
    x, y = torch.randn(256, 64, device="cuda:0"), torch.randint(0, 10, (256,), device="cuda:1")
    ok, detail = _capture_equal(torch, model, x, y, str(root / "multi"))
    verdict("multi_gpu", ok, detail + " (model on cuda:0 and cuda:1)")


class _Toggle:
    """A hook attached to and detached from one model between blocks (benchmark-only use of hook internals)."""

    def __init__(self, hook: Any, trainer: Trainer) -> None:
        self.hook, self.trainer = hook, trainer

    def attach(self) -> None:
        h = self.hook
        for attr in ("_top", "_params", "_submodules"):
            getattr(h, attr).clear()
        h._params_generation = -1
        h._globals_installed = False
        h.register_module(self.trainer.model)
        h.register_loss(self.trainer.loss_fn)

    def detach(self) -> None:
        self.hook.flush()
        self.hook._remove_handles()


def _toggled(trainer: Trainer, hook: Any, rounds: int, block: int) -> tuple[float, float, float]:
    """(total hooked/plain ratio, median per-round ratio, plain ms/step) over ABBA rounds."""
    toggle = _Toggle(hook, trainer)
    toggle.attach()
    trainer.train(5)
    toggle.detach()
    plain = hooked = 0.0
    ratios = []
    for r in range(rounds):
        t = {"plain": 0.0, "hooked": 0.0}
        for kind in ("plain", "hooked", "hooked", "plain") if r % 2 == 0 else ("hooked", "plain", "plain", "hooked"):
            if kind == "hooked":
                toggle.attach()
            start = time.perf_counter()
            trainer.train(block)
            if kind == "hooked":
                toggle.detach()
            t[kind] += time.perf_counter() - start
        ratios.append(t["hooked"] / t["plain"])
        plain, hooked = plain + t["plain"], hooked + t["hooked"]
    hook.close()
    return hooked / plain, statistics.median(ratios), 1000 * plain / (2 * rounds * block)


def check_overhead(torch: Any, root: Path, trainer: Trainer, quick: bool) -> None:
    import trainspect as ts

    configs = {
        "overhead_default": ({}, 1.02),
        "overhead_wgl100": (
            {
                "include_collections": ["weights", "biases", "gradients", "losses"],
                "save_config": ts.SaveConfig(save_interval=100),
            },
            1.05,
        ),
    }
    rounds, block = (6, 20) if quick else (12, 25)
    for name, (kwargs, target) in configs.items():
        hook = ts.torch.Hook(str(root / name), **kwargs)
        try:
            total, median, ms = _toggled(trainer, hook, rounds, block)
        except AttributeError as exc:  # the hook's internals changed: the toggle needs updating
            verdict(name, False, f"cannot attach/detach the hook: {exc}")
            continue
        verdict(
            name,
            total <= target,
            f"{total:.3f}x (median of rounds {median:.3f}x; plain {ms:.1f} ms/step; "
            f"{rounds} ABBA rounds x {block} steps) target <= {target:.2f}x",
        )


def _smi(uuid: str) -> list[float] | None:
    if shutil.which("nvidia-smi") is None:
        return None
    cmd = [
        "nvidia-smi",
        f"--id={uuid}",
        "--query-gpu=utilization.gpu,memory.used,power.draw",
        "--format=csv,noheader,nounits",
    ]
    try:
        line = (
            subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True).stdout.strip().splitlines()[0]
        )
        return [float(v) for v in line.split(",")]
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None


def profiled_run(
    torch: Any, root: Path, trainer: Trainer, seconds: float
) -> tuple[Path, list[tuple[float, list[float]]], dict[str, float]]:
    """Train under a profiling hook (system monitor at 100 ms) for ``seconds``; nvidia-smi read every second."""
    import trainspect as ts
    from trainspect.hooks.cuda_memory import install_cuda_memory
    from trainspect.hooks.samplers.gpu import GPUSampler
    from trainspect.profiler import ProfilerConfig

    probe = GPUSampler()
    uuid = probe.targets[0].uuid
    probe.close()
    out = root / "gpu_run"
    hook = ts.torch.Hook(str(out), profiler_config=ProfilerConfig(system_monitor_interval_millis=100))
    hook.register_module(trainer.model)
    hook.register_loss(trainer.loss_fn)
    recorder = getattr(getattr(hook, "_extras", None), "framework_recorder", None)
    if recorder is not None:
        install_cuda_memory(recorder)  # idempotent if the hook already did
    smi: list[tuple[float, list[float]]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        trainer.train(10)
        reading = _smi(uuid)
        if reading is not None:
            smi.append((time.time(), reading))
    direct = {
        "allocated": float(torch.cuda.memory_allocated(0)),
        "reserved": float(torch.cuda.memory_reserved(0)),
        "peak": float(torch.cuda.max_memory_allocated(0)),
    }
    hook.close()
    return out, smi, direct


def check_nvml_vs_smi(out: Path, smi: list[tuple[float, list[float]]]) -> None:
    import numpy as np

    from trainspect.profiler import SystemMetricsReader

    if not smi:
        verdict("nvml_vs_smi", None, "nvidia-smi is not available")
        return
    arrays = next(iter(SystemMetricsReader(out).read_arrays().values()))
    util, mem, power = (arrays.column(f"gpu0_{k}") for k in ("utilization_percent", "memory_used_bytes", "power_watts"))
    if util is None or mem is None:
        verdict(
            "nvml_vs_smi", False, f"GPU metrics missing; recorded: {[k for k in arrays.keys if k.startswith('gpu')]}"
        )
        return
    rows = [int(np.argmin(np.abs(arrays.timestamps - t))) for t, _ in smi]
    ours = np.array([[util[i], mem[i] / 2**20, power[i] if power is not None else np.nan] for i in rows])
    theirs = np.array([r for _, r in smi])
    util_ok = np.nanmedian(ours[:, 0]) >= 50 and np.nanmedian(theirs[:, 0]) >= 50
    mem_ok = bool(np.all(np.abs(ours[:, 1] - theirs[:, 1]) <= np.maximum(0.05 * theirs[:, 1], 512)))
    power_ok = power is None or bool(np.nanmedian(np.abs(ours[:, 2] - theirs[:, 2]) / theirs[:, 2]) <= 0.25)
    verdict(
        "nvml_vs_smi",
        util_ok and mem_ok and power_ok,
        f"{len(smi)} readings; utilisation % ours/smi median {np.nanmedian(ours[:, 0]):.0f}/{np.nanmedian(theirs[:, 0]):.0f}; "
        f"memory MiB {np.nanmedian(ours[:, 1]):.0f}/{np.nanmedian(theirs[:, 1]):.0f}; "
        f"power W {np.nanmedian(ours[:, 2]):.0f}/{np.nanmedian(theirs[:, 2]):.0f}",
    )


def check_cuda_memory(out: Path, direct: dict[str, float]) -> None:
    import numpy as np

    from trainspect.profiler import FrameworkMetricsReader, SystemMetricsReader

    cols = next(iter(FrameworkMetricsReader(out).read_tables().values())).step_metrics
    got = {k: cols.get(f"gpu0_memory_{k}_bytes") for k in ("allocated", "reserved", "peak_allocated")}
    if any(v is None or not len(v) for v in got.values()):
        verdict("cuda_memory", False, f"framework CUDA memory not recorded; step_metrics keys {sorted(cols)}")
        return
    last = {k: float(v[-1]) for k, v in got.items()}  # type: ignore[index]
    slack = 0.05 * direct["reserved"]  # the last step end was recorded a moment before torch.cuda was read
    fw_ok = (
        abs(last["reserved"] - direct["reserved"]) <= slack and abs(last["allocated"] - direct["allocated"]) <= slack
    )
    fw_ok = fw_ok and direct["peak"] - slack <= last["peak_allocated"] <= direct["peak"]
    arrays = next(iter(SystemMetricsReader(out).read_arrays().values()))
    job, device = arrays.column("gpu0_process_memory_used_bytes"), arrays.column("gpu0_memory_used_bytes")
    job_ok = job is not None and device is not None and np.isfinite(job).any()
    detail = (
        f"framework last allocated/reserved/peak {last['allocated'] / 2**20:.0f}/{last['reserved'] / 2**20:.0f}/"
        f"{last['peak_allocated'] / 2**20:.0f} MiB vs torch.cuda {direct['allocated'] / 2**20:.0f}/"
        f"{direct['reserved'] / 2**20:.0f}/{direct['peak'] / 2**20:.0f} MiB"
    )
    if job_ok:
        j, d = float(np.nanmax(job)), float(np.nanmax(device))  # type: ignore[arg-type]
        job_ok = direct["reserved"] <= j <= d
        detail += f"; NVML job {j / 2**20:.0f} MiB, device {d / 2**20:.0f} MiB"
    else:
        detail += "; NVML per-process memory not recorded (another PID namespace?)"
    verdict("cuda_memory", fw_ok and job_ok, detail)


def check_monitor_cpu(root: Path, seconds: float) -> None:
    import psutil

    from trainspect.hooks.system_monitor import SystemMonitor
    from trainspect.profiler import ProfilerConfig

    proc = psutil.Process()

    def cpu_over(wait: float) -> float:
        before, t0 = sum(proc.cpu_times()[:2]), time.monotonic()
        time.sleep(wait)
        return (sum(proc.cpu_times()[:2]) - before) / (time.monotonic() - t0)

    idle = cpu_over(seconds / 2)
    mon = SystemMonitor(root / "cpu_cost", node="n0", config=ProfilerConfig(system_monitor_interval_millis=100))
    mon.start()
    time.sleep(0.5)
    busy = cpu_over(seconds)
    mon.close()
    cost = 100 * max(busy - idle, 0.0)
    verdict(
        "monitor_cpu",
        cost <= 2.0,
        f"{cost:.2f} % of one core at 100 ms with NVML (idle process {100 * idle:.2f} %) target <= 2 %",
    )


def check_report(out: Path) -> None:
    from trainspect.report.render import render_report

    html = render_report(out)
    ok = "GPU 0" in html and "gpu0_utilization_percent" in html
    verdict("report", ok, f"{len(html)} bytes of HTML; GPU 0 panel {'present' if ok else 'MISSING'}")


def check_tensorboard(out: Path) -> None:
    try:
        from tensorboard.backend import application
        from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
        from tensorboard.plugins import base_plugin
        from werkzeug import test as wtest
        from werkzeug import wrappers

        from trainspect.tb_plugin.plugin import TrainspectPlugin
    except ImportError as exc:
        verdict("tensorboard", None, f"tensorboard is not installed ({exc})")
        return
    mux = plugin_event_multiplexer.EventMultiplexer()
    provider = data_provider.MultiplexerDataProvider(mux, str(out.parent))
    context = base_plugin.TBContext(logdir=str(out.parent), data_provider=provider, multiplexer=mux)
    app = application.TensorBoardWSGI([TrainspectPlugin(context)], data_provider=provider)
    client = wtest.Client(app, wrappers.Response)
    prefix = "/data/plugin/trainspect"
    series = json.loads(client.get(f"{prefix}/timeseries", query_string={"run": out.name, "points": "100"}).data)
    heat = json.loads(client.get(f"{prefix}/heatmap", query_string={"run": out.name, "columns": "100"}).data)
    groups = {g["id"]: g for g in series.get("groups", [])}
    gpu_series = [s for s in groups.get("gpu_memory", {}).get("series", []) if any(v is not None for v in s["values"])]
    ok = bool(gpu_series) and "gpu0" in json.dumps(heat.get("rows", []))
    verdict("tensorboard", ok, f"/timeseries gpu_memory series {len(gpu_series)}; /heatmap rows {heat.get('rows')}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer rounds and shorter runs")
    args = parser.parse_args()
    torch = _cuda()
    if torch is None:
        for name in CHECKS:
            print(f"SKIP: no CUDA device ({name})", flush=True)
        return 0
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="ts_gpu_check_"))
    print(f"{torch.cuda.device_count()} CUDA device(s): {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    check_mapping(torch)
    check_capture(torch, root)
    check_multi_gpu(torch, root)
    trainer = Trainer(torch)
    trainer.train(10)  # cudnn autotuning, allocator warm-up
    check_overhead(torch, root, trainer, args.quick)
    out, smi, direct = profiled_run(torch, root, trainer, 5.0 if args.quick else 10.0)
    check_nvml_vs_smi(out, smi)
    check_cuda_memory(out, direct)
    check_report(out)
    check_tensorboard(out)
    del trainer
    torch.cuda.empty_cache()
    check_monitor_cpu(root, 6.0 if args.quick else 10.0)
    shutil.rmtree(root, ignore_errors=True)
    print(
        f"{'all checks passed' if not FAILED else 'FAILED: ' + ', '.join(FAILED)} in {time.monotonic() - started:.0f} s"
    )
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
