"""Progress of a computation never mixes with results on stdout."""

import re

import dask.array as da
import pytest

from rfol_dask.progress import compute


def test_distributed_progress_goes_to_stderr(cluster_client, capsys):
    x = da.ones((400, 400), chunks=100).sum()
    (total,) = compute(x, progress=True, client=cluster_client, desc="summing")
    assert total == 160_000
    out, err = capsys.readouterr()
    assert out == ""
    assert "summing: [" in err and "100% Completed" in err


def test_local_progress_goes_to_stderr(capsys):
    (total,) = compute(da.ones(10, chunks=5).sum(), progress=True, desc="local sum")
    assert total == 10
    out, err = capsys.readouterr()
    assert out == "" and "local sum:" in err and "100%" in err


@pytest.mark.slow
@pytest.mark.cluster
def test_notebook_shows_a_widget(tmp_path):
    """In a Jupyter kernel with ipywidgets the bar is a widget, and nothing is printed."""
    pytest.importorskip("ipywidgets")
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    code = (
        "import dask.array as da\nfrom distributed import Client, LocalCluster\n"
        "from rfol_dask.progress import compute\n"
        "client = Client(LocalCluster(n_workers=1, processes=False, dashboard_address=':0'))\n"
        "print(compute(da.ones((200, 200), chunks=50).sum(), progress=True, client=client)[0])\n"
        "client.close(); client.cluster.close()"
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = nb.cells[0].outputs
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)
    streams = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "40000.0" in streams and "Completed" not in streams
    # the widget was updated while the cell waited, up to the end: every group reads "n / n"
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    counts = [re.search(r">(\d+) / (\d+)<", str(w["state"].get("value"))) for w in state.values()]
    counts = [m.groups() for m in counts if m]
    assert counts and all(done == total for done, total in counts)


def _wait_for(path, seconds=30.0):
    import os
    import time

    end = time.monotonic() + seconds
    while not os.path.exists(path) and time.monotonic() < end:
        time.sleep(0.02)
    return os.path.exists(path)


@pytest.mark.slow
def test_consume_receives_each_result_while_the_others_run(cluster_client, tmp_path, capsys):
    """With ``consume`` a result reaches the client as soon as it is made (the second task
    waits for the first one's consumption, so gathering at the end would time it out), and
    the client forgets it then."""
    import time

    import dask

    flag = str(tmp_path / "first-consumed")
    first = dask.delayed(sum)([1, 2, 3], dask_key_name="consume-first")
    second = dask.delayed(_wait_for)(flag, dask_key_name="consume-second")
    got = []

    def consume(i, result):
        got.append((i, result))
        if i == 0:
            open(flag, "w").close()
            for _ in range(
                250
            ):  # released on the cluster (the client's loop drops its last reference)
                if "consume-first" not in cluster_client.futures:
                    break
                time.sleep(0.02)
            assert "consume-first" not in cluster_client.futures

    assert (
        compute(
            first, second, client=cluster_client, progress=True, desc="streamed", consume=consume
        )
        is None
    )
    assert got == [(0, 6), (1, True)]
    assert "streamed: [" in capsys.readouterr().err  # the text bar ran beside the gathers


def test_consume_on_the_local_scheduler_gets_every_result_in_order():
    import dask

    got = []
    parts = [dask.delayed(int)(k) for k in range(4)]
    assert compute(*parts, consume=lambda i, r: got.append((i, r))) is None
    assert got == [(k, k) for k in range(4)]


def test_a_task_cancelled_while_results_stream_is_named(cluster_client, tmp_path):
    """A future cancelled under the consumer (a cluster restart, another thread) ends the compute
    with an error that says so, not with the CancelledError handed to ``consume`` as a result."""
    import dask
    from distributed import Future

    first = dask.delayed(sum)([1, 2], dask_key_name="cancel-first")
    second = dask.delayed(_wait_for)(str(tmp_path / "never"), dask_key_name="cancel-second")
    got = []

    def consume(i, result):
        got.append((i, result))
        if i == 0:
            cluster_client.cancel([Future("cancel-second", cluster_client)], force=True)

    with pytest.raises(
        RuntimeError, match="streamed: task 'cancel-second' was cancelled.*Run it again"
    ):
        compute(first, second, client=cluster_client, desc="streamed", consume=consume)
    assert got == [(0, 3)]


def test_worker_lists_are_asked_of_the_scheduler_not_the_clients_cache(cluster_client, monkeypatch):
    """distributed's periodic refresh can empty the cache ``scheduler_info()`` returns between its
    update and its read; a fit then saw no workers (seen once: ``array_split`` into 0 groups)."""
    from rfol_dask.memory import n_slots
    from rfol_dask.placement import worker_addresses

    want = sorted(cluster_client.scheduler_info()["workers"])
    monkeypatch.setattr(cluster_client, "scheduler_info", lambda *a, **k: {"workers": {}})
    assert worker_addresses(cluster_client) == want and n_slots(cluster_client) == 2


def test_a_search_without_a_client_reports_each_stage(capsys):
    from conftest import smooth_operator_data

    from rfol_dask import RandomFeatureOperatorCV

    U, V = smooth_operator_data(80, 8)
    RandomFeatureOperatorCV(
        n_features=60, distributions=("cauchy",), random_state=0, progress=True
    ).fit(da.from_array(U, chunks=40), da.from_array(V, chunks=40))
    out, err = capsys.readouterr()
    assert out == ""
    assert re.search(
        r"selection \(full, cauchy\): \d+ scales x 1 N x \d+ alphas on 1 split\(s\) in", err
    )


def test_text_bars_into_a_log_redraw_every_ten_seconds(capsys):
    """A bar written to a file or a pipe draws every 10 s, not every 0.1 s (each drawing stays in
    a log); a terminal keeps the smooth 0.1 s."""
    import io

    from rfol_dask.progress import _redraw_seconds

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    assert _redraw_seconds(io.StringIO()) == 10.0 and _redraw_seconds(Terminal()) == 0.1
    closed = io.StringIO()
    closed.close()
    assert _redraw_seconds(closed) == 10.0
    import dask

    from rfol_dask.progress import compute

    compute(dask.delayed(lambda: __import__("time").sleep(0.6))(), progress=True, desc="slow")
    drawn = capsys.readouterr().err
    assert drawn.count("\r") <= 2, (
        drawn
    )  # captured stderr is no terminal: one drawing, and the last


def test_a_bar_into_a_log_does_not_delay_the_end_of_the_work():
    """Drawing rarely must not mean polling rarely: a short computation with a bar into a log
    (not a terminal) ends as fast as without one."""
    import time

    import dask

    from rfol_dask.progress import compute

    t0 = time.perf_counter()
    compute(dask.delayed(sum)([1, 2]), progress=True, desc="quick")
    assert time.perf_counter() - t0 < 2.0


@pytest.mark.slow
def test_the_package_sets_a_no_workers_timeout_that_distributed_keeps():
    """Upstream's default lets tasks wait for ever on a cluster whose workers all ended; the
    package's default (set when an estimator is imported) holds whichever of rfol_dask and
    distributed is imported first."""
    import subprocess
    import sys

    code = (
        "from rfol_dask import RandomFeatureOperator; import distributed, dask; "
        "print(dask.config.get('distributed.scheduler.no-workers-timeout'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "300s"
