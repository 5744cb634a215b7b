"""Validates FHIR resources with the `fhir.resources` models (R4B; the resources we emit are
the same in R4), and SMART Scheduling Links manifests against the fields the spec requires.

    python validate.py DIR

DIR holds `*.json` (one resource each), `*.ndjson` (one resource a line) and
`*.manifest.json` (a `$bulk-publish` manifest). Prints one line per failure and exits 1 if any.
"""

import json
import pathlib
import re
import sys

from fhir.resources.R4B import get_fhir_model_class

INSTANT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
TYPES = {"Location", "PractitionerRole", "Schedule", "Slot"}


def check_resource(obj):
    kind = obj.get("resourceType")
    model = get_fhir_model_class(kind)
    model.model_validate(obj)
    if kind == "Slot":
        for field in ("start", "end"):
            if not INSTANT.match(obj[field]):
                raise ValueError(f"Slot.{field} {obj[field]!r} is not a timestamp with an offset")


def check_manifest(obj):
    for field in ("transactionTime", "request", "output", "error"):
        if field not in obj:
            raise ValueError(f"manifest without {field}")
    if not INSTANT.match(obj["transactionTime"]):
        raise ValueError(f"transactionTime {obj['transactionTime']!r} is not a timestamp")
    if not obj["request"].startswith(("http://", "https://")):
        raise ValueError("request is not an absolute URL")
    if not isinstance(obj["error"], list):
        raise ValueError("error is not an array")
    for item in obj["output"]:
        if item.get("type") not in TYPES:
            raise ValueError(f"output type {item.get('type')!r}")
        if not item.get("url", "").startswith(("http://", "https://")):
            raise ValueError(f"output url {item.get('url')!r} is not absolute")
        states = item.get("extension", {}).get("state", [])
        if not isinstance(states, list) or not all(isinstance(s, str) for s in states):
            raise ValueError(f"output extension.state {states!r} is not a list of strings")


def main(directory):
    failures, checked = 0, 0
    for path in sorted(pathlib.Path(directory).iterdir()):
        if path.name.endswith(".manifest.json"):
            items = [(path.name, json.loads(path.read_text()), check_manifest)]
        elif path.suffix == ".json":
            items = [(path.name, json.loads(path.read_text()), check_resource)]
        elif path.suffix == ".ndjson":
            lines = [l for l in path.read_text().splitlines() if l.strip()]
            items = [(f"{path.name}:{i + 1}", json.loads(l), check_resource) for i, l in enumerate(lines)]
        else:
            continue
        for name, obj, check in items:
            checked += 1
            try:
                check(obj)
            except Exception as e:  # noqa: BLE001 - every failure is reported the same way
                failures += 1
                print(f"FAIL {name}: {e}")
    print(f"fhir.resources (R4B): {checked} checked, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
