"""The result document of a run: derived metrics, msgcask / peer ratios, its JSON Schema.

The schema is ``result.schema.json`` next to this module (schema_version 1);
``validate`` checks a document against it. Units: seconds, bytes, messages/s.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
from importlib import resources
from typing import Any

from msgcask.workloads.config import RunConfig

SCHEMA_VERSION = 1
SCHEMA_FILE = "result.schema.json"


def load_schema() -> dict[str, Any]:
    """The JSON Schema of a result document."""
    text = resources.files("msgcask.workloads").joinpath(SCHEMA_FILE).read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def validate(doc: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` if ``doc`` does not match the schema."""
    import jsonschema  # type: ignore[import-untyped]

    jsonschema.validate(doc, load_schema())


def build_result(
    cfg: RunConfig, runs: list[dict[str, Any]], skipped: list[dict[str, str]]
) -> dict[str, Any]:
    """The full document: parameters, runs with derived metrics, skips, ratios."""
    for run in runs:
        run.update(derived_metrics(run))
        if run["compaction_on"]:  # the bound is the schedule's: space pressure alone
            # (which still compacts a full store) keeps no threshold.
            run["space"].update(space_bound_check(run["samples"], cfg.threshold, cfg.max_file_size))
    return {
        "schema_version": SCHEMA_VERSION,
        "workload": cfg.workload,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "msgcask_version": _version(),
        "machine": machine(),
        "params": cfg.as_params(),
        "runs": runs,
        "skipped": skipped,
        "ratios": ratios(runs),
        "plots": {},
    }


def derived_metrics(run: dict[str, Any]) -> dict[str, Any]:
    """Space and write amplification, peak RSS and compaction counters of a run."""
    samples = run["samples"]
    amps = [
        s["disk_bytes"] / s["live_payload_bytes"] for s in samples if s["live_payload_bytes"] > 0
    ]
    last = samples[-1] if samples else {}
    final_live = last.get("live_payload_bytes", 0)
    stats = run.get("final_stats") or {}
    bytes_put = run["bytes_put"]
    rss = [s["rss_bytes"] for s in samples if s["rss_bytes"] is not None]
    anon = [s["rss_anon_bytes"] for s in samples if s.get("rss_anon_bytes") is not None]
    files = [s["data_files"] for s in samples if s.get("data_files") is not None]
    written, record_bytes = stats.get("bytes_written"), stats.get("bytes_put")
    store_live = stats.get("live_bytes")
    return {
        "space": {
            "max_amplification": max(amps) if amps else None,
            "final_amplification": (last["disk_bytes"] / final_live) if final_live else None,
            "store_final_amplification": (stats["disk_bytes"] / store_live)
            if store_live and stats.get("disk_bytes") is not None
            else None,
            "max_disk_bytes": max((s["disk_bytes"] for s in samples), default=None),
            "final_disk_bytes": last.get("disk_bytes"),
            "final_live_payload_bytes": final_live if samples else None,
            "max_data_files": max(files) if files else None,
            "final_data_files": files[-1] if files else None,
        },
        "write_amplification": (written / record_bytes)
        if written is not None and record_bytes
        else None,
        # None, not 0, where nothing is counted: a workdir on tmpfs (no write-back)
        # or a kernel without per-task I/O accounting.
        "io_write_amplification": (run["io_bytes_written"] / bytes_put)
        if run["io_bytes_written"] and bytes_put
        else None,
        "peak_rss_bytes": max(rss) if rss else None,
        # Subjects share one process: what a run adds is peak minus start.
        "start_rss_bytes": rss[0] if rss else None,
        "peak_rss_anon_bytes": max(anon) if anon else None,
        "compaction": stats.get("compaction") if stats else None,
    }


# Data files allowed beyond live / threshold (design brief, guarantee 5): the write
# head, the file being sealed and the output of a pass under way.
BOUND_FILES = 3


def space_bound_check(
    samples: list[dict[str, Any]], threshold: float, max_file_size: int
) -> dict[str, int]:
    """How many samples after the first compaction pass had more data-file bytes
    than ``live_bytes / threshold + BOUND_FILES`` data files, and how many had
    more than that counting the index file too (msgcask runs only: peers have no
    such counts)."""
    after = [
        s
        for s in samples
        if s.get("compaction_passes")
        and s.get("data_bytes") is not None
        and s.get("live_bytes") is not None
    ]
    if not after:
        return {}

    def over(s: dict[str, Any], used: int) -> bool:
        return bool(used > s["live_bytes"] / threshold + BOUND_FILES * max_file_size)

    return {
        "samples_after_first_pass": len(after),
        "samples_over_bound": sum(over(s, s["data_bytes"]) for s in after),
        "samples_over_bound_with_index": sum(
            over(s, s["data_bytes"] + (s.get("index_bytes") or 0)) for s in after
        ),
    }


# Each ratio and where a run's summary holds its two sides.
_RATIOS: dict[str, tuple[str, ...]] = {
    "put_throughput": ("throughput", "put_per_s"),
    "get_ack_throughput": ("throughput", "get_ack_per_s"),
    "put_p99": ("latency", "put", "p99"),
    # A run stopped early stored less: its disk says nothing of the workload's.
    "max_disk": ("space", "max_disk_bytes"),
    "final_disk": ("space", "final_disk_bytes"),
}


def ratios(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """msgcask (compaction on, else the first msgcask run) over every other run.

    Throughput ratios above 1, put p99 and disk ratios below 1 favour msgcask. A ratio is
    None when either side is missing or the other run did not finish.
    """
    ours = [r for r in runs if r["subject"] == "msgcask"]
    if not ours:
        return []
    base = next((r for r in ours if r["compaction_on"]), ours[0])
    out = []
    for other in runs:
        if other is base:
            continue
        comparable = base["status"] == "ok" and other["status"] == "ok"
        out.append(
            {
                "base": base["label"],
                "other": other["label"],
                "comparable": comparable,
                **{
                    name: _div(_at(base, path), _at(other, path), comparable)
                    for name, path in _RATIOS.items()
                },
            }
        )
    return out


def _at(run: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        run = run[key]
    return run


def _div(a: float | None, b: float | None, ok: bool) -> float | None:
    return a / b if ok and a is not None and b else None


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    mem: int | None = None
    with contextlib.suppress(ValueError, OSError):  # not every platform names these
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "memory_bytes": mem,
    }


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("msgcask")
    except PackageNotFoundError:
        return None


def write_json(doc: dict[str, Any], path: str) -> None:
    """Write ``doc`` as indented JSON (written to a temp name, then renamed)."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)
