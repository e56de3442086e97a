"""Round 64, the lead's own: the disk-full message's one-line cut keeps a letter with its combining accent."""

from __future__ import annotations

import errno

import pytest

from aspire.storage import DiskFullError, on_disk_full


def test_a_disk_full_message_cut_never_leaves_a_letter_without_its_accent(tmp_path):
    long = "a" * 185 + "e\u0301" + "z" * 50  # after "[Errno 28] ", the e is the 197th character: the cut at 197
    with pytest.raises(DiskFullError) as caught:
        with on_disk_full(tmp_path, "vectors.npy"):
            raise OSError(errno.ENOSPC, long)
    message = str(caught.value)
    assert "] " + "a" * 185 + "..." in message  # the e went with its accent
    assert "e..." not in message and "\u0301..." not in message
