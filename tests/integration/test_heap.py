import platform

import pytest

from topomodel.heap import keep_freed_memory


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="mallopt's parameters are glibc's")
def test_glibc_takes_both_settings():
    assert keep_freed_memory() is True


def test_the_program_keeps_freed_memory_and_the_library_does_not(monkeypatch):
    import topomodel.cli as cli
    import topomodel.heap as heap

    calls = []
    monkeypatch.setattr(heap, "keep_freed_memory", lambda: calls.append(1) or True)
    assert cli.main(["units", "1 GB/s"]) == 0
    assert calls == []
    monkeypatch.setattr("sys.argv", ["topomodel", "units", "1 GB/s"])
    assert cli.main() == 0
    assert calls == [1]
