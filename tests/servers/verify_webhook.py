"""Verifies webhook requests with the Standard Webhooks reference library (PyPI
`standardwebhooks`), an implementation independent of the service's.

Reads JSON from stdin: {"cases": [{"secret": "whsec_…", "headers": {…}, "body": "…"}, …]}
and prints a JSON list with, per case, "ok" or the library's reason for refusing it.
`--check` only tells whether the library can be imported (exit 0) or not (exit 3).
"""

import json
import sys

try:
    from standardwebhooks.webhooks import Webhook, WebhookVerificationError
except ImportError as e:  # the test skips (or fails, when told to require it)
    print(f"standardwebhooks is not installed: {e}", file=sys.stderr)
    sys.exit(3)

if "--check" in sys.argv:
    sys.exit(0)

results = []
for case in json.load(sys.stdin)["cases"]:
    try:
        Webhook(case["secret"]).verify(case["body"], case["headers"])
        results.append("ok")
    except WebhookVerificationError as e:
        results.append(f"refused: {e}")
print(json.dumps(results))
