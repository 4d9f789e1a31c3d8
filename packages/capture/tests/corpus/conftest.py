"""Make the corpus harness (`capture_corpus_support`) importable under --import-mode=importlib."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
