# SPDX-License-Identifier: Apache-2.0
"""Write the API's OpenAPI document to a file: `python -m app.api.openapi OUT` (default: stdout).
The console generates its TypeScript client from it."""

import json
import sys

from app.api.main import create_app


def main(argv: list[str]) -> int:
    doc = json.dumps(create_app().openapi(), indent=2, sort_keys=False) + "\n"
    if len(argv) > 1 and argv[1] != "-":
        with open(argv[1], "w") as f:
            f.write(doc)
    else:
        sys.stdout.write(doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
