"""Tests of the installers and of what the bundle relies on; Qt runs offscreen (set before Qt is imported)."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
