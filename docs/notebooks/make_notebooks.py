"""Write the tutorial notebooks of this folder from the cells below (run it after editing a
cell; CI executes the notebooks themselves with nbmake: ``pytest --nbmake docs/notebooks``)."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
ROOT_CELL = """\
{imports}from pathlib import Path

import pandas as pd

from simulator import api

# the repository's root (the notebook runs in docs/notebooks/)
ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "scenarios").is_dir())
EXAMPLES = ROOT / "scenarios" / "examples\""""

STDLIB = "import json\nimport subprocess\nimport sys\nimport tempfile\n"

NOTEBOOKS = {
    "01-bubbles-memory-overlap.ipynb": [
        new_markdown_cell(
            "# Bubbles, memory and overlap\n\n"
            "The three questions a parallelism lecture asks of a training step, answered by "
            "simulation and held against their closed forms: how much of a pipelined step is "
            "bubble, how much memory ZeRO saves, how much of the gradient traffic hides under "
            "the backward pass."
        ),
        new_code_cell(ROOT_CELL.format(imports="")),
        new_markdown_cell(
            "## Pipeline bubbles\n\nFive schedules of the same 32-layer model on 4 stages "
            "(TP 2) with 16 micro-batches. GPipe's and 1F1B's bubble is (p - 1)/(m + p - 1) "
            "of the step, 3/19 = 15.8% here; interleaving and zero-bubble schedules cut it."
        ),
        new_code_cell(
            "rows = []\n"
            'for name in ["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2"]:\n'
            '    m = api.run(api.load(EXAMPLES / f"pipeline-{name}.yaml")).metrics\n'
            "    rows.append({\n"
            '        "schedule": name, "step_s": m.step_time_s, "bubble": m.bubble_fraction,\n'
            '        "peak_GB": m.peak_memory_bytes / 1e9,\n'
            "    })\n"
            "bubbles = pd.DataFrame(rows)\n"
            "bubbles"
        ),
        new_code_cell(
            "p, m = 4, 16\n"
            "closed_form = (p - 1) / (m + p - 1)\n"
            'one_f_one_b = bubbles.set_index("schedule").loc["1f1b", "bubble"]\n'
            'print(f"1F1B bubble {one_f_one_b:.3f} simulated, {closed_form:.3f} closed form")\n'
            "assert abs(one_f_one_b - closed_form) < 0.03  # stages are not perfectly equal"
        ),
        new_markdown_cell(
            "## ZeRO memory\n\nPer-GPU model states of Llama 3 8B on 8 GPUs under each ZeRO "
            "stage, against Rajbhandari et al.'s (2 + 2 + K) x params / N_d accounting "
            "(K = 12 bytes of Adam state per parameter with mixed precision)."
        ),
        new_code_cell(
            "rows = []\n"
            "for zero in range(4):\n"
            '    s = api.load(EXAMPLES / "zero1-llama3-8b.yaml", [f"parallelism.zero={zero}"])\n'
            "    rank = api.memory_frame(api.memory_report(s)).iloc[0]\n"
            "    psi, n = rank[\"param_count\"], s.dp\n"
            "    p, g, k = s.precision.bytes_per_param(s.training.optimizer)\n"
            "    # Rajbhandari et al. 2020, sec. 5: each stage shards one more of the three\n"
            "    expected = psi * ((p / n if zero >= 3 else p) + (g / n if zero >= 2 else g)\n"
            "                      + (k / n if zero >= 1 else k))\n"
            "    states = rank[\"params\"] + rank[\"grads\"] + rank[\"optimizer\"]\n"
            '    rows.append({"zero": zero, "model_states_GB": states / 1e9,\n'
            '                 "closed_form_GB": expected / 1e9, "total_GB": rank["total"] / 1e9})\n'
            "zero = pd.DataFrame(rows)\n"
            "assert (abs(zero.model_states_GB / zero.closed_form_GB - 1) < 0.01).all()\n"
            "zero"
        ),
        new_markdown_cell(
            "## Overlap\n\nData-parallel gradient buckets reduce while the backward pass "
            "runs: the share of communication overlapped, by bucket size."
        ),
        new_code_cell(
            "rows = []\n"
            'for bucket in ["25 MB", "100 MB", "400 MB"]:\n'
            '    s = api.load(EXAMPLES / "ddp-megatron-1.7b.yaml",\n'
            '                 [f"parallelism.bucket_size={bucket}"])\n'
            "    m = api.run(s).metrics\n"
            '    rows.append({"bucket": bucket, "step_s": m.step_time_s,\n'
            '                 "overlapped": m.overlap_fraction,\n'
            '                 "exposed_comm": m.exposed_comm_fraction})\n'
            "pd.DataFrame(rows)"
        ),
    ],
    "02-topology-what-if.ipynb": [
        new_markdown_cell(
            "# A topology what-if\n\nLlama 3 70B with TP 8 and PP 4 on 4 DGX H100 nodes: how "
            "does the step move with the NIC bandwidth and the leaf oversubscription? Each "
            "point is a full step simulation; the result is a pandas table and a picture."
        ),
        new_code_cell(ROOT_CELL.format(imports="").replace(
            "import pandas as pd\n", "import matplotlib.pyplot as plt\nimport pandas as pd\n")),
        new_code_cell(
            "rows = []\n"
            'for nic in ["100 Gb/s", "200 Gb/s", "400 Gb/s"]:\n'
            "    for over in [1, 4]:\n"
            '        s = api.load(EXAMPLES / "tp-sp-llama3-70b.yaml", [\n'
            '            "model.layers=16", "training.global_batch=8",\n'
            '            f"cluster.topology.nic_bandwidth={nic}",\n'
            '            f"cluster.topology.oversubscription=[{over}]",\n'
            "        ])\n"
            "        m = api.run(s).metrics\n"
            '        rows.append({"nic": nic, "oversubscription": over,\n'
            '                     "step_s": m.step_time_s, "mfu": m.mfu,\n'
            '                     "exposed_comm": m.exposed_comm_fraction})\n'
            "study = pd.DataFrame(rows)\n"
            "study"
        ),
        new_code_cell(
            "fig, ax = plt.subplots(figsize=(6, 3.5))\n"
            'for over, part in study.groupby("oversubscription"):\n'
            '    ax.plot(part["nic"], part["step_s"], marker="o", label=f"{over}:1 leaves")\n'
            'ax.set_xlabel("NIC bandwidth")\n'
            'ax.set_ylabel("step (s)")\n'
            "ax.legend()\n"
            "# more bandwidth never slows a step\n"
            'for _, part in study.groupby("oversubscription"):\n'
            '    assert part["step_s"].is_monotonic_decreasing or part["step_s"].nunique() == 1'
        ),
        new_markdown_cell(
            "The same study as a spec file runs on local cores or Ray with `trainsim sweep "
            "SPEC` (see the what-if guide), and writes `results.parquet` with heatmaps."
        ),
    ],
    "03-plans-variability-goodput.ipynb": [
        new_markdown_cell(
            "# Plan search, step variability and goodput\n\n"
            "Which layout to run, how much the step varies from step to step, and what the "
            "job keeps of its wall clock over weeks of failures."
        ),
        new_code_cell(
            ROOT_CELL.format(imports=STDLIB)
            + "\nWORK = Path(tempfile.mkdtemp())  # the plan's files and the job's scenario"
        ),
        new_markdown_cell(
            "## Plan search\n\n`trainsim plan` bounds every layout, simulates the promising "
            "ones and writes the best as scenario files."
        ),
        new_code_cell(
            "out = WORK / \"plan\"\n"
            "done = subprocess.run(\n"
            '    [sys.executable, "-m", "simulator", "plan",\n'
            '     str(EXAMPLES / "pipeline-1f1b.yaml"),\n'
            '     "--top", "2", "--budget", "8", "--out", str(out), "--fresh",\n'
            '     "--format", "json"],\n'
            "    capture_output=True, text=True, check=True)\n"
            "plans = pd.DataFrame(json.loads(done.stdout)[\"ranked\"])\n"
            "plans.head()"
        ),
        new_markdown_cell(
            "## Step variability\n\nTwenty steps drawn from the one simulated: GPU-to-GPU "
            "speed spread and kernel jitter (the scenario's `variability:` section)."
        ),
        new_code_cell(
            's = api.load(EXAMPLES / "tp-sp-llama3-70b.yaml", ["model.layers=16",\n'
            '             "training.global_batch=8", "variability.kernel_jitter=0.02"])\n'
            "r = api.run(s, samples=20)\n"
            'print({k: round(v, 4) for k, v in r.samples.summary().items()\n'
            '       if k.startswith(("step_time_p", "variability_cost"))})\n'
            'r.samples.frame.head()'
        ),
        new_markdown_cell(
            "## Goodput over weeks\n\nA 32-GPU job failing once per node-day, with and "
            "without a spare node: ETTR with its 95% interval."
        ),
        new_code_cell(
            'job = WORK / "job.yaml"\n'
            'job.write_text(f"""include: {EXAMPLES / "ddp-megatron-1.7b.yaml"}\n'
            "failures:\n"
            "  node_rate: 1 / d\n"
            "  repair: {{law: fixed, mean: 12 h}}\n"
            '""")\n'
            "done = subprocess.run(\n"
            '    [sys.executable, "-m", "simulator", "goodput", str(job), "--days", "7",\n'
            '     "--seeds", "20", "--sweep", "failures.spares=0,1,2", "--format", "json"],\n'
            "    capture_output=True, text=True, check=True)\n"
            "pd.DataFrame(json.loads(done.stdout))"
        ),
    ],
}


def main() -> None:
    for name, cells in NOTEBOOKS.items():
        nb = new_notebook(cells=cells)
        nb.metadata["kernelspec"] = {
            "name": "python3", "display_name": "Python 3", "language": "python"
        }  # fmt: skip
        nbformat.write(nb, HERE / name)
        print("wrote", HERE / name)


if __name__ == "__main__":
    main()
