"""SageMaker notebook cells run unchanged: smdebug's notebook_utils views and local readers, answered by trainspect."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import nb_synth
import numpy as np
import pytest

FIX = Path(__file__).resolve().parents[1] / "data" / "smdebug_profiler_resources" / "test_traces"


@pytest.fixture
def smdebug_modules() -> Iterator[None]:
    from trainspect import smdebug_compat

    assert smdebug_compat.install()
    yield
    smdebug_compat.uninstall()


def test_metrics_histogram_on_sagemaker_profiler_output(smdebug_modules: None) -> None:
    from smdebug.profiler.analysis.notebook_utils.metrics_histogram import MetricsHistogram
    from smdebug.profiler.system_metrics_reader import LocalSystemMetricsReader

    reader = LocalSystemMetricsReader(str(FIX))
    reader.refresh_event_file_list()
    latest = reader.get_timestamp_of_latest_available_file()
    assert latest > 1e15  # microseconds, as smdebug's readers give them
    view = MetricsHistogram(reader)
    assert view.plot(starttime=0, endtime=latest, select_dimensions=["GPU"], select_events=[".*"]) is view
    fig = view.figure()["algo-1"]
    assert list(fig) == ["gpu0", "gpu1", "gpu_total"]
    values = [e.value for e in reader.get_events(0, latest) if e.dimension == "GPUUtilization" and e.name == "gpu0"]
    assert fig["gpu0"]["counts"] == np.histogram(values, bins=np.arange(0, 102, 2))[0].tolist()
    html = view._repr_html_()
    assert "<svg" in html and "gpu0 (" in html
    view.plot(select_dimensions=["CPU"], select_events=["total"])
    assert list(view.figure()["algo-1"]) == ["cpu_total"]
    with pytest.raises(ValueError, match=r"select_dimensions=\['Memory'\].*this run has: CPUUtilization/cpu0"):
        view.plot(select_dimensions=["Memory"])


def test_step_histogram_and_heatmap_on_a_local_run(tmp_path: Path, smdebug_modules: None) -> None:
    from smdebug.profiler.algorithm_metrics_reader import LocalAlgorithmMetricsReader
    from smdebug.profiler.analysis.notebook_utils.heatmap import Heatmap
    from smdebug.profiler.analysis.notebook_utils.step_histogram import StepHistogram
    from smdebug.profiler.system_metrics_reader import LocalSystemMetricsReader

    run = nb_synth.full_run(tmp_path / "run")
    framework_reader = LocalAlgorithmMetricsReader(str(run))
    end = framework_reader.get_timestamp_of_latest_available_file()
    steps = StepHistogram(framework_reader).plot(
        starttime=0, endtime=end, select_events=["Step:ModeKeys.TRAIN"], select_dimensions=[".*"], show_workers=True
    )
    assert set(steps.figure()) == {"worker_0", "worker_1"}
    assert steps.plot(show_workers=False, select_events=["Forward"]).figure()["all workers"]["Forward"]["count"] == 40
    system_reader = LocalSystemMetricsReader(str(run))
    heat = Heatmap(system_reader, framework_reader, select_dimensions=["GPU"], select_events=[".*"], plot_height=450)
    assert heat.figure()["node-a"]["rows"] == ["gpu0", "gpu1"] and "<svg" in heat._repr_html_()


def test_unsupported_profiler_names_say_what_to_use(smdebug_modules: None) -> None:
    from trainspect.smdebug_compat import SmdebugNotSupported

    with pytest.raises(SmdebugNotSupported, match="LocalSystemMetricsReader"):
        from smdebug.profiler.system_metrics_reader import S3SystemMetricsReader  # noqa: F401
