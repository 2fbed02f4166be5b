"""Output helpers shared by the bench scripts."""

import json
import os
import statistics


def write_json_atomically(path, obj):
    """Writes obj as indented JSON to path through a temporary name, so that path is either the old
    file or the complete new one."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def spread(values):
    """The median of repeated measurements with their spread: {median, min, max, values}."""
    values = list(values)
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}


def format_spread(s, fmt):
    """'median [min, max]', each formatted with fmt; '-' for a missing measurement."""
    if s is None:
        return "-"
    return f"{format(s['median'], fmt)} [{format(s['min'], fmt)}, {format(s['max'], fmt)}]"
