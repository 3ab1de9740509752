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
    code = ("import dask.array as da\nfrom distributed import Client, LocalCluster\n"
            "from rfol_dask.progress import compute\n"
            "client = Client(LocalCluster(n_workers=1, processes=False, dashboard_address=':0'))\n"
            "print(compute(da.ones((200, 200), chunks=50).sum(), progress=True, client=client)[0])\n"
            "client.close(); client.cluster.close()")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = nb.cells[0].outputs
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)
    streams = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "40000.0" in streams and "Completed" not in streams
    # the widget was updated while the cell waited, up to the end: every group reads "n / n"
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    counts = [re.search(r">(\d+) / (\d+)<", str(w["state"].get("value"))) for w in state.values()]
    counts = [m.groups() for m in counts if m]
    assert counts and all(done == total for done, total in counts)
