"""``python -m langchain_selfrag.evaluation.bio.judges --claims FILE``: every judge's agreement with hand labels."""

from .agreement import main

raise SystemExit(main())
