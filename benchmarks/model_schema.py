"""The spec file schema of docs/presets.md: every module kind's fields, generated from the code.

    python benchmarks/model_schema.py            # print the tables
    python benchmarks/model_schema.py --write    # also record them in docs/presets.md

The tables come from the module dataclasses' field metadata (pipeplan.models.modules,
pipeplan.models.schema_docs.schema_markdown): the same source as the spec checks and
`pipeplan model --schema`. Nothing is measured.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import computed_line, print_or_write  # noqa: E402

from pipeplan.models.schema_docs import schema_markdown  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "presets.md"
COMMAND = "python benchmarks/model_schema.py --write"


def block() -> str:
    """What ``--write`` records between the ``model-schema`` markers (tests/test_docs_tables.py checks it)."""
    return "\n\n".join([schema_markdown(), computed_line(COMMAND)])


def main() -> int:
    return print_or_write(DOC, "model-schema", block, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
