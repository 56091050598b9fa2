"""``python -m langchain_selfrag.evaluation DATASET ...`` runs ``selfrag eval``."""

import sys

from .cli import main

sys.exit(main())
