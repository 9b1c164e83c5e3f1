"""The plain-text summary of a result: aligned tables, no colour, no box drawing."""

from __future__ import annotations

from typing import Any

from msgcask.plural import counted

MiB = 2**20


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned, text left-aligned."""
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]

    def line(cells: list[str]) -> str:
        out = []
        for i, (cell, w) in enumerate(zip(cells, widths, strict=True)):
            out.append(cell.ljust(w) if i == 0 else cell.rjust(w))
        return "  ".join(out).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def fmt(value: float | None, spec: str = ".0f", scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, spec)


def summary(doc: dict[str, Any]) -> str:
    """Everything a reader needs from a result, as text."""
    p = doc["params"]
    sizes = {
        "deep-queue": f"depth={p['depth']}",
        "drain-history": f"messages={p['messages']} fill={p['fill']} repeat={p['repeat']}",
        "priority-pin": f"rounds={p['rounds']} max_store_size={p['max_store_size']}",
        "slow-consumer": f"messages={p['messages']} window={p['window']}",
        "dlq-heavy": f"messages={p['messages']} pin_every={p['pin_every']}",
        "selector-skip": f"messages={p['messages']} pin_every={p['pin_every']}",
    }.get(doc["workload"], f"messages={p['messages']}")
    head = (
        f"workload {doc['workload']}: {sizes} size={'mix' if p['size_mix'] else p['size']} "
        f"batch={p['batch']} sync={p['sync']} max_file_size={p['max_file_size']} "
        f"threshold={p['threshold']} compaction={p['compaction']} "
        f"producers={p['producers']} consumers={p['consumers']}"
        + (" one_cpu" if p.get("one_cpu") else "")
    )
    rows = []
    for r in doc["runs"]:
        lat, sp, comp = r["latency"], r["space"], r["compaction"] or {}
        crash = (r["reopen"]["crash"] or {}).get("seconds")
        rows.append(
            [
                r["label"],
                r["status"],
                fmt(r["throughput"]["put_per_s"]),
                fmt(r["throughput"]["get_ack_per_s"]),
                fmt(lat["put"]["p50"], ".3f", 1e3),
                fmt(lat["put"]["p99"], ".3f", 1e3),
                fmt(lat["get_ack"]["p99"], ".3f", 1e3),
                fmt(sp["max_disk_bytes"], ".1f", 1 / MiB),
                fmt(sp["final_disk_bytes"], ".1f", 1 / MiB),
                fmt(sp["max_amplification"], ".1f"),
                fmt(sp["final_amplification"], ".1f"),
                fmt(r["write_amplification"], ".2f"),
                fmt(r["peak_rss_bytes"], ".0f", 1 / MiB)
                + (
                    f" (+{(r['peak_rss_bytes'] - r['start_rss_bytes']) / MiB:.0f})"
                    if r["peak_rss_bytes"] is not None and r["start_rss_bytes"] is not None
                    else ""
                ),
                str(comp["passes"]) if comp.get("passes") is not None else "-",
                fmt(r["reopen"]["clean_seconds"], ".3f"),
                fmt(crash, ".3f"),
            ]
        )
    parts = [
        head,
        "",
        table(
            [
                "run",
                "status",
                "put/s",
                "get+ack/s",
                "put p50 ms",
                "put p99 ms",
                "get+ack p99 ms",
                "max disk MiB",
                "final disk MiB",
                "max disk/live",
                "final disk/live",
                "write amp",
                "peak RSS MiB (+run)",
                "passes",
                "reopen s",
                "crash reopen s",
            ],
            rows,
        ),
    ]
    if doc["ratios"]:
        ratio_rows = [
            [
                x["other"],
                fmt(x["put_throughput"], ".2f"),
                fmt(x["get_ack_throughput"], ".2f"),
                fmt(x["put_p99"], ".2f"),
                fmt(x["max_disk"], ".3f"),
                fmt(x["final_disk"], ".3f"),
            ]
            for x in doc["ratios"]
        ]
        base = doc["ratios"][0]["base"]
        parts += [
            "",
            f"ratios {base} / other (throughput above 1, put p99 and disk below 1 favour msgcask):",
            table(["other", "put/s", "get+ack/s", "put p99", "max disk", "final disk"], ratio_rows),
        ]
    for r in doc["runs"]:
        if "samples_over_bound" in r["space"]:
            parts.append(
                f"{r['label']}: space bound (data <= live / threshold + 3 files): exceeded in "
                f"{r['space']['samples_over_bound']} of "
                f"{counted(r['space']['samples_after_first_pass'], 'sample')} "
                "after the first pass; counting the index file too, in "
                f"{r['space']['samples_over_bound_with_index']}"
            )
        for e in r["errors"]:
            parts.append(f"{r['label']}: error: {e}")
        crash_error = (r["reopen"]["crash"] or {}).get("error")
        if crash_error:
            parts.append(f"{r['label']}: reopen after kill -9 not measured: {crash_error}")
        for n in r["notes"]:
            parts.append(f"{r['label']}: note: {n}")
        parts.extend(_phase_lines(r, p["max_file_size"]))
    for s in doc["skipped"]:
        parts.append(f"skipped {s['subject']}: {s['reason']}")
    if doc["plots"]:
        parts.append("")
        parts.extend(f"plot {name}: {path}" for name, path in doc["plots"].items())
    return "\n".join(parts)


def _phase_lines(run: dict[str, Any], file_size: int) -> list[str]:
    ph, label, out = run["phases"], run["label"], []
    if "drain_history" in ph:
        d = ph["drain_history"]
        if any(x["data_files"] is not None for x in d["drains"]):
            after_drains = "data files after each drain: " + ", ".join(
                str(x["data_files"])
                + (f" ({x['data_files_settled']} settled)" if "data_files_settled" in x else "")
                for x in d["drains"]
            )
        else:  # a peer: no data files to count, its disk instead
            after_drains = "disk after each drain: " + ", ".join(
                f"{fmt(x['disk_bytes'], '.1f', 1 / MiB)} MiB" for x in d["drains"]
            )
        out.append(
            f"{label}: after/fresh put/s {fmt(d['put_throughput_ratio'], '.2f')}, "
            f"get+ack/s {fmt(d['get_ack_throughput_ratio'], '.2f')}, put p99 "
            f"{fmt(d['put_p99_ratio'], '.2f')}; {after_drains}"
        )
    if "priority_pin" in ph:
        d = ph["priority_pin"]
        high, written = d["high_messages_per_round"], d["round_bytes"]
        out.append(
            f"{label}: {d['rounds_completed']} of {counted(d['rounds'], 'round')} "
            f"({fmt(high['min'])} to {fmt(high['max'])} high-priority messages "
            f"each; {fmt(written['min'], '.2f', 1 / file_size)} to "
            f"{fmt(written['max'], '.2f', 1 / file_size)} data files written a round)"
        )
    if "deep_queue" in ph:
        dec = ph["deep_queue"]["deciles"]
        p99s = " ".join(fmt(x["put_p99"], ".2f", 1e3) for x in dec)
        out.append(f"{label}: put p99 ms per tenth of the depth: {p99s}")
    return out
