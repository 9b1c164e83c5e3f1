"""PNG plots of a result (matplotlib with the Agg backend, imported only here).

- ``space``: disk bytes vs live bytes over time per run, compaction passes marked;
- ``latency``: p99 of put and of get+ack per time window, every run on one axis;
- ``files``: per-file occupancy at the end of each msgcask run, like a
  defragmenter's map: one bar per data file, its live fraction filled;
- ``memory``: resident memory against messages put (flat = flow to disk).
"""

from __future__ import annotations

import os
from typing import Any

MiB = 2**20
KIND_COLOURS = {"journal": "tab:blue", "compacted": "tab:green"}


def write_plots(doc: dict[str, Any], out_dir: str, stem: str) -> dict[str, str]:
    """Write every plot that has data; return name -> path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    runs = doc["runs"]
    title = f"msgcask bench {doc['workload']}"
    written: dict[str, str] = {}
    for name, draw in (
        ("space", _space),
        ("latency", _latency),
        ("files", _files),
        ("memory", _memory),
    ):
        fig = draw(plt, runs, title)
        if fig is None:
            continue
        path = os.path.join(out_dir, f"{stem}-{name}.png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written[name] = path
    return written


def _space(plt: Any, runs: list[dict[str, Any]], title: str) -> Any:
    runs = [r for r in runs if r["samples"]]
    if not runs:
        return None
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.6 * len(runs) + 0.6), squeeze=False)
    for ax, run in zip(axes[:, 0], runs, strict=True):
        t = [s["t"] for s in run["samples"]]
        ax.plot(t, [s["disk_bytes"] / MiB for s in run["samples"]], label="disk")
        ax.plot(
            t,
            [max(0, s["live_payload_bytes"]) / MiB for s in run["samples"]],
            "--",
            label="live message bytes",
        )
        if any(s["live_bytes"] is not None for s in run["samples"]):
            ax.plot(
                t,
                [(s["live_bytes"] or 0) / MiB for s in run["samples"]],
                ":",
                label="live record bytes (stats)",
            )
        for k, ev in enumerate(run["compaction_events"]):
            ax.axvline(
                ev,
                color="tab:red",
                alpha=0.35,
                linewidth=0.8,
                label="compaction pass" if k == 0 else None,
            )
        ax.set_title(run["label"], fontsize=9)
        ax.set_ylabel("MiB")
        ax.legend(fontsize=7, loc="upper left")
    axes[-1, 0].set_xlabel("seconds")
    fig.suptitle(f"{title}: disk vs live bytes")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return fig


def _latency(plt: Any, runs: list[dict[str, Any]], title: str) -> Any:
    runs = [r for r in runs if r["latency_windows"]]
    if not runs:
        return None
    fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for ax, op, name in ((axes[0], "put", "put"), (axes[1], "get_ack", "get+ack")):
        for run in runs:
            pts = [
                (w["t"], w[op]["p99"] * 1e3)
                for w in run["latency_windows"]
                if w[op]["p99"] is not None
            ]
            if pts:
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    marker=".",
                    markersize=3,
                    label=run["label"],
                )
        ax.set_ylabel(f"{name} p99 (ms)")
        ax.set_yscale("log")
        if ax.has_data():
            ax.legend(fontsize=7)
    axes[1].set_xlabel("seconds (window end)")
    fig.suptitle(f"{title}: p99 latency per window")
    fig.tight_layout()
    return fig


def _files(plt: Any, runs: list[dict[str, Any]], title: str) -> Any:
    runs = [r for r in runs if r["files"]]
    if not runs:
        return None
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 2.4 * len(runs) + 0.6), squeeze=False)
    for ax, run in zip(axes[:, 0], runs, strict=True):
        files = sorted(run["files"], key=lambda f: f["file_id"] or 0)
        x = list(range(len(files)))
        size = [(f["size"] or 0) / MiB for f in files]
        live = [(f["live_bytes"] or 0) / MiB for f in files]
        colours = [KIND_COLOURS.get(f["kind"] or "", "tab:gray") for f in files]
        ax.bar(x, size, color="none", edgecolor="0.6", linewidth=0.6, width=0.9)
        ax.bar(x, live, color=colours, width=0.9)
        # One 1 KiB message in a 1 MiB file is too thin to see; a minimum-height tick shows
        # every file that still holds a live message.
        tick = 0.02 * max(size, default=1.0)
        holding = [i for i, f in enumerate(files) if f["live_messages"] and live[i] < tick]
        if holding:
            ax.bar(
                holding,
                [tick] * len(holding),
                color=[colours[i] for i in holding],
                width=0.9,
                alpha=0.5,
                label="holds live messages (thin, shown at 2%)",
            )
        pinned = [i for i, f in enumerate(files) if f["needed_acks"]]
        if pinned:
            ax.plot(
                pinned,
                [size[i] for i in pinned],
                "v",
                color="tab:orange",
                markersize=3,
                label="holds needed acks or delivery counts",
            )
            ax.legend(fontsize=7)
        ax.set_title(
            f"{run['label']}: {len(files)} data files, filled = live "
            "(blue journal, green compacted)",
            fontsize=9,
        )
        ax.set_ylabel("MiB")
        if len(files) <= 40:
            ax.set_xticks(x, [str(f["file_id"]) for f in files], fontsize=6, rotation=90)
        else:
            ax.set_xlabel("data files in id order")
    fig.suptitle(f"{title}: data file occupancy at the end")
    fig.tight_layout()
    return fig


def _memory(plt: Any, runs: list[dict[str, Any]], title: str) -> Any:
    runs = [r for r in runs if any(s["rss_bytes"] for s in r["samples"])]
    if not runs:
        return None
    fig, ax = plt.subplots(figsize=(9, 4))
    for run in runs:
        pts = [(s["messages_put"], s["rss_bytes"] / MiB) for s in run["samples"] if s["rss_bytes"]]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=run["label"])
        # The runner's own latency arrays grow with the run; leave them out.
        anon = [
            (
                x["messages_put"],
                (x["rss_anon_bytes"] - (x.get("runner_buffer_bytes") or 0)) / MiB,
            )
            for x in run["samples"]
            if x.get("rss_anon_bytes")
        ]
        if anon:
            ax.plot(
                [p[0] for p in anon],
                [p[1] for p in anon],
                ":",
                color=ax.lines[-1].get_color(),
                label=f"{run['label']} (anonymous, less the runner's buffers)",
            )
    ax.set_xlabel("messages put")
    ax.set_ylabel("RSS (MiB)")
    ax.legend(fontsize=7)
    ax.set_title(f"{title}: resident memory (one process, runs in turn)")
    fig.tight_layout()
    return fig
