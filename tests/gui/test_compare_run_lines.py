"""A Compare column's line under its text says how the run ended where it was cut at the length limit, as a single
reply's footer does (newcomer trial: the plain run stopped at the limit, and only the JSON export said so)."""

from __future__ import annotations

import pytest

from app.gui.history_rows import Message
from app.gui.widgets.message_widget import MessageWidget


@pytest.fixture(autouse=True)
def styled(qtbot):
    from app.gui.application import create_application

    create_application()


def test_a_compare_column_cut_at_the_length_limit_says_so(qtbot):
    ar = {"mode": "ar", "ttft_ms": 274.0, "tokens_per_s": 46.6, "acceptance_rate": None, "new_tokens": 56,
          "stop_reason": "max_new_tokens", "text": "One-to-five: 1"}  # fmt: skip
    spec = {**ar, "mode": "auto", "ttft_ms": 285.0, "tokens_per_s": 46.7, "new_tokens": 35, "stop_reason": "eos",
            "text": "One-to-five: 1"}  # fmt: skip
    compare = {"ar": ar, "spec": spec, "speedup": 1.002, "identical": True, "sampled": False}
    message = Message(id=1, conversation_id=1, position=1, role="assistant", content="One-to-five: 1", created_at=0.0,
                      stats={**spec, "compare": compare})  # fmt: skip
    widget = MessageWidget(message)
    qtbot.addWidget(widget)
    assert widget.ar_column.metrics.text() == "Length limit reached · TTFT 274 ms · 46.6 tokens/s · 56 tokens"
    assert widget.spec_column.metrics.text() == "TTFT 285 ms · 46.7 tokens/s · 35 tokens"
