"""Output helpers shared by the bench scripts."""

import json
import os


def write_json_atomically(path, obj):
    """Writes obj as indented JSON to path through a temporary name, so that path is either the old
    file or the complete new one."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
