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


def test_the_quiet_collector_is_restored_after_its_block():
    """Within the block the youngest threshold is raised and what existed is frozen;
    after it (also after an error) both are as they were, and an outer freeze stays."""
    import gc

    from topomodel.heap import quiet_collector

    before = gc.get_threshold()
    gc.unfreeze()  # the program's run above leaves its objects frozen
    with quiet_collector(before[0] + 1000):
        assert gc.get_threshold() == (before[0] + 1000, *before[1:])
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0

    @quiet_collector(before[0] + 5)
    def fails():
        assert gc.get_threshold()[0] == before[0] + 5
        raise ValueError("inside")

    with pytest.raises(ValueError, match="inside"):
        fails()
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with quiet_collector():
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
